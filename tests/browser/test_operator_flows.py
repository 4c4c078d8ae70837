"""The operator's day in a real browser: create an API task, trigger it and watch its log arrive
without reloading; resolve an unknown execution with a reason."""

from __future__ import annotations

import time
from typing import Any

from scheduler_core import TaskDefinition
from scheduler_core.db import close_engine, create_engine
from scheduler_core.store import ExecutionRepository, TaskRepository
from tests.browser.conftest import Dashboard, Screens, login
from tests.helpers.journal import abandon_running_execution


def test_create_an_api_task_trigger_it_and_watch_the_log_arrive(page: Any, dashboard: Dashboard,
                                                                 shot: Screens) -> None:
    login(page, dashboard)
    page.goto(dashboard("/tasks/new"))
    page.locator("#id").fill("ping-receiver")
    page.locator("#name").fill("Ping the receiver")
    page.locator("#kind").select_option("api")
    page.locator("#cron").fill("30 2 * * 1-5")
    page.locator("#timezone").fill("Europe/Berlin")
    preview = page.get_by_text("02:30").first  # the live cron preview (next run times) arrives by HTMX
    preview.wait_for()
    page.locator("#url").fill(dashboard.receiver.url("/slow/6"))
    page.locator("#method").select_option("POST")
    shot(page, "task-form")
    page.get_by_role("button", name="Create task").click()
    page.wait_for_load_state("networkidle")
    assert page.get_by_role("heading", level=1).filter(has_text="Ping the receiver").count() == 1, page.content()
    shot(page, "task-detail")
    page.get_by_role("button", name="Trigger").click()
    page.wait_for_load_state("networkidle")
    shot(page, "triggered")
    page.goto(dashboard("/logs/?task=ping-receiver"))
    page.wait_for_load_state("networkidle")
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))
    assert page.get_by_role("cell", name="success", exact=True).count() == 0  # the call takes 6 s
    page.get_by_role("cell", name="success", exact=True).first.wait_for(timeout=30_000)
    assert navigations == [], "the log row must arrive by the page's own refresh, not a reload"
    shot(page, "log-arrived")
    calls = [r for r in dashboard.receiver.requests if r.path == "/slow/6"]
    assert len(calls) == 1 and calls[0].method == "POST" and calls[0].header("Idempotency-Key")


def _unknown_execution(dashboard: Dashboard) -> str:
    """A non-idempotent task whose owner began the attempt and died: the dashboard's node isolates it."""
    engine = create_engine(dashboard.database_url)
    try:
        TaskRepository(engine).insert(TaskDefinition(id="charge-cards", name="Charge cards", cron="0 3 * * *",
                                                     handler={"kind": "hook"}))
        occurrence = abandon_running_execution(engine, "charge-cards", started=True, lease_ms=1000)
        repo = ExecutionRepository(engine, "browser-test", 1000)
        deadline = time.monotonic() + 60
        while (execution := repo.get(occurrence)) is None or execution.status != "unknown":
            assert time.monotonic() < deadline, f"not isolated: {execution}"
            time.sleep(0.2)
        return occurrence
    finally:
        close_engine(engine)


def test_resolve_an_unknown_execution_with_a_reason(page: Any, dashboard: Dashboard, shot: Screens) -> None:
    occurrence = _unknown_execution(dashboard)
    login(page, dashboard)
    page.goto(dashboard("/executions/unknown"))
    card = page.locator("section.card").filter(has_text=occurrence)
    shot(page, "unknown-review")
    card.get_by_label("discarded", exact=False).check()
    page.once("dialog", lambda dialog: dialog.accept())
    card.get_by_role("button", name="Resolve").click()  # no reason yet: the browser asks for it (required)
    assert card.get_by_role("textbox").evaluate("el => el.validity.valueMissing")
    card.get_by_role("textbox").fill("Checked the payment provider: no charge was made for this run.")
    page.once("dialog", lambda dialog: dialog.accept())
    card.get_by_role("button", name="Resolve").click()
    page.wait_for_load_state("networkidle")
    assert page.locator(".flash").filter(has_text="resolved as discarded").count() == 1, page.content()
    shot(page, "resolved")
    engine = create_engine(dashboard.database_url)
    try:
        execution = ExecutionRepository(engine, "browser-test", 1000).get(occurrence)
        assert execution is not None and execution.status == "discarded"
    finally:
        close_engine(engine)
    page.goto(dashboard("/audit/?action=execution.resolve_unknown"))
    assert page.get_by_text("no charge was made").count() == 1
    shot(page, "audit")


def test_backfill_previews_as_the_range_is_picked_then_queues(page: Any, dashboard: Dashboard, shot: Screens) -> None:
    """The backfill form's live preview (htmx, no button pressed), then its queue button."""
    engine = create_engine(dashboard.database_url)
    try:
        TaskRepository(engine).insert(TaskDefinition(id="hourly-sync", name="Hourly sync", cron="0 * * * *",
                                                     timezone="Europe/Berlin", handler={"kind": "hook"}))
    finally:
        close_engine(engine)
    login(page, dashboard)
    page.goto(dashboard("/tasks/view/hourly-sync"))
    page.get_by_role("link", name="Backfill past fire times…").click()
    page.locator("#backfill_start").fill("2026-01-10T00:00")
    page.locator("#backfill_end").fill("2026-01-10T05:30")
    page.locator("#backfill_reason").fill("the warehouse was down")
    page.locator("#backfill-preview").get_by_text("6 fire times").wait_for()
    shot(page, "backfill-preview")
    page.get_by_role("button", name="Queue the runs").click()
    page.wait_for_url("**/tasks/view/hourly-sync")
    assert page.get_by_text("6 past runs queued (6 new, 0 missed or skipped before)").count() == 1, page.content()
