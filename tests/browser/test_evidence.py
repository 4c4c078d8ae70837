"""Evidence on screen, in a real browser: times in the viewer's zone with the zone named and UTC
on hover (the page context runs in Europe/Berlin); a bulk resolution from the unknown review
(preview count, outcome, reason, confirmation) and its result in the run-history grid."""

from __future__ import annotations

import re
import time
from typing import Any

from scheduler_core import TaskDefinition
from scheduler_core.db import close_engine, create_engine
from scheduler_core.store import ExecutionRepository, TaskRepository
from tests.browser.conftest import Dashboard, Screens, login
from tests.helpers.journal import abandon_running_execution


def test_times_show_in_the_viewers_zone_named_with_utc_on_hover(page: Any, dashboard: Dashboard,
                                                                shot: Screens) -> None:
    login(page, dashboard)
    page.goto(dashboard("/users/"))
    created = page.locator("time[datetime]").first
    utc = created.get_attribute("datetime")
    text, title = created.inner_text(), created.get_attribute("title")
    # Berlin is UTC+1 in winter (CET) and UTC+2 in summer (CEST): en-GB names both.
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d CES?T", text), text
    assert title == f"{utc[:10]} {utc[11:19]} UTC", (title, utc)
    hour_utc, hour_shown = int(utc[11:13]), int(text[11:13])
    assert (hour_shown - hour_utc) % 24 in (1, 2)
    page.goto(dashboard("/nodes/"))
    heartbeat = page.locator("time[data-relative]").first
    assert re.fullmatch(r"just now|\d+ s ago|\d+ min ago", heartbeat.inner_text())
    assert heartbeat.get_attribute("title").endswith(" UTC)")
    shot(page, "nodes-relative")


def _unknown_execution(dashboard: Dashboard, task_id: str) -> str:
    """A non-idempotent task whose owner began the attempt and died: the dashboard's node isolates it."""
    engine = create_engine(dashboard.database_url)
    try:
        TaskRepository(engine).insert(TaskDefinition(id=task_id, name=task_id.title(), cron="0 3 * * *",
                                                     handler={"kind": "hook"}))
        occurrence = abandon_running_execution(engine, task_id, started=True, lease_ms=1000)
        repo = ExecutionRepository(engine, "browser-test", 1000)
        deadline = time.monotonic() + 60
        while (execution := repo.get(occurrence)) is None or execution.status != "unknown":
            assert time.monotonic() < deadline, f"not isolated: {execution}"
            time.sleep(0.2)
        time.sleep(1.2)  # past the second a preview leaves to commits in flight
        return occurrence
    finally:
        close_engine(engine)


def test_bulk_resolve_from_the_review_with_a_preview_count(page: Any, dashboard: Dashboard, shot: Screens) -> None:
    occurrence = _unknown_execution(dashboard, "sync-ledger")
    login(page, dashboard)
    page.goto(dashboard("/executions/unknown?task=sync-ledger"))
    card = page.locator("section.card").filter(has_text=occurrence)
    assert card.get_by_role("link", name="sync-ledger").count() >= 1  # the task, a link
    shot(page, "review-filtered")
    page.get_by_role("link", name="Resolve all matching…").click()
    assert page.locator("#bulk-count").inner_text() == "1"
    page.get_by_label("discarded", exact=False).check()
    page.get_by_label("Reason (required)").fill("The ledger shows no sync for this run.")
    shot(page, "bulk-preview")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Resolve 1").click()
    page.wait_for_load_state("networkidle")
    assert page.locator(".flash").filter(has_text="Resolved 1 of the 1 previewed").count() == 1, page.content()
    shot(page, "bulk-resolved")
    page.goto(dashboard("/runs/?q=sync-ledger"))
    cell = page.locator("a.run-cell").first
    assert cell.inner_text() == "D" and cell.get_attribute("href") == f"/executions/view/{occurrence}"
    shot(page, "run-grid")
