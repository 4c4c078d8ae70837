"""Forms that help (#14), in a real browser: a refused form puts the cursor on the first error
and keeps a secret just typed; a resolution refused for want of a status keeps its reason;
disabling a task or a user asks once, deleting a task asks once (its confirmation page, no
dialog on top)."""

from __future__ import annotations

import re
from typing import Any

from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from scheduler_core.db import close_engine, create_engine
from scheduler_core.store import TaskRepository
from scheduler_core.store.users import UserRepository
from tests.browser.conftest import Dashboard, Screens, login
from tests.browser.test_operator_flows import _unknown_execution


def _task(dashboard: Dashboard, task_id: str) -> TaskDefinition | None:
    engine = create_engine(dashboard.database_url)
    try:
        repo = TaskRepository(engine)
        if task_id == "make:report-2":
            return repo.insert(TaskDefinition(id="report-2", name="Report", cron="0 2 * * *",
                                              handler={"kind": "hook"}))
        return repo.get(task_id)
    finally:
        close_engine(engine)


def test_a_refused_task_form_focuses_the_first_error_and_keeps_the_typed_secret(page: Any, dashboard: Dashboard,
                                                                               shot: Screens) -> None:
    login(page, dashboard)
    page.goto(dashboard("/tasks/new"))
    page.locator("#id").fill("typed-secret-task")
    page.locator("#name").fill("Typed secret")
    page.locator("#cron").fill("every day")
    page.locator("#url").fill("https://example.org/hook")
    page.locator("#headers").fill("Authorization: Bearer typed-in-the-browser")
    page.get_by_role("button", name="Create task").click()
    page.wait_for_load_state("load")
    assert page.locator("#cron-error").inner_text().startswith("Cron expression:")
    assert page.evaluate("document.activeElement.id") == "cron"  # the cursor is on the first error
    assert page.locator("#headers").input_value() == "Authorization: Bearer typed-in-the-browser"
    shot(page, "task-form-error")
    page.locator("#cron").fill("0 3 * * *")  # fix the one field and send again: nothing else to retype
    page.get_by_role("button", name="Create task").click()
    page.wait_for_url(re.compile(r".*/tasks/view/typed-secret-task$"))
    stored = _task(dashboard, "typed-secret-task")
    assert stored is not None and stored.handler is not None
    assert stored.handler["headers"] == {"Authorization": "Bearer typed-in-the-browser"}


def test_a_resolution_without_a_status_keeps_the_reason(page: Any, dashboard: Dashboard, shot: Screens) -> None:
    occurrence = _unknown_execution(dashboard)
    login(page, dashboard)
    page.goto(dashboard("/executions/unknown"))
    card = page.locator("section.card").filter(has_text=occurrence)
    card.get_by_role("textbox").fill("Checked the ledger: the charge went through once.")
    page.once("dialog", lambda dialog: dialog.accept())
    card.get_by_role("button", name="Resolve").click()  # no status chosen
    page.wait_for_load_state("load")
    card = page.locator("section.card").filter(has_text=occurrence)
    assert "Choose success or discarded" in card.inner_text()
    assert card.get_by_role("textbox").input_value() == "Checked the ledger: the charge went through once."
    shot(page, "resolve-refused")


def test_disable_asks_once_and_delete_asks_once(page: Any, dashboard: Dashboard, shot: Screens) -> None:
    _task(dashboard, "make:report-2")
    login(page, dashboard)
    dialogs: list[str] = []

    def answer(accept: bool) -> None:
        page.once("dialog", lambda dialog: (dialogs.append(dialog.message),
                                            dialog.accept() if accept else dialog.dismiss()))

    page.goto(dashboard("/tasks/view/report-2"))
    answer(False)
    page.get_by_role("button", name="Disable").click()
    page.wait_for_load_state("load")
    assert len(dialogs) == 1 and _task(dashboard, "report-2").enabled  # type: ignore[union-attr]
    answer(True)
    page.get_by_role("button", name="Disable").click()
    page.wait_for_url(re.compile(r".*/tasks/view/report-2$"))
    page.get_by_role("button", name="Enable").wait_for()
    assert dialogs == ["Disable task \u2068report-2\u2069? It stops running on its schedule until enabled again."] * 2
    assert not _task(dashboard, "report-2").enabled  # type: ignore[union-attr]
    page.get_by_role("link", name="Delete").click()
    page.wait_for_url(re.compile(r".*/tasks/delete/report-2$"))
    shot(page, "delete-question")
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))
    page.get_by_role("button", name="Delete task report-2").click()
    page.wait_for_url(re.compile(r".*/tasks/$"))
    assert len(dialogs) == 2, dialogs  # the confirmation page asked; no dialog on top of it
    assert _task(dashboard, "report-2") is None


def test_disabling_a_user_asks_once(page: Any, dashboard: Dashboard) -> None:
    engine = create_engine(dashboard.database_url)
    try:
        UserRepository(engine).create("night-shift", "operator", generate_password_hash("night shift pw"))
        login(page, dashboard)
        page.goto(dashboard("/users/manage/night-shift"))
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))
        page.get_by_role("button", name="Disable night-shift").click()
        page.get_by_text("night-shift is disabled and cannot log in").wait_for()
        assert dialogs == ["Disable night-shift? Their session ends at once."]
        user = UserRepository(engine).get("night-shift")
        assert user is not None and user.disabled
    finally:
        close_engine(engine)


def test_a_refused_boosted_form_focuses_its_first_error(page: Any, dashboard: Dashboard) -> None:
    """The new-user form posts through htmx (hx-boost): the answer is swapped in, not loaded."""
    login(page, dashboard)
    page.goto(dashboard("/users/new"))
    page.get_by_label("Name").fill("day-shift")
    page.get_by_label("Password", exact=True).fill("day shift pw 1")
    page.get_by_label("Password again").fill("day shift pw 2")
    page.get_by_role("button", name="Create").click()
    page.locator("#new-confirm[aria-invalid='true']").wait_for()
    # htmx settles the swap a moment after it (then app.js moves the focus): wait for it, bounded.
    page.wait_for_function("document.activeElement && document.activeElement.id === 'new-confirm'", timeout=5_000)
    assert page.get_by_label("Name").input_value() == "day-shift"
