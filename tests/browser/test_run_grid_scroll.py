"""The run grid (/runs/) is the page: with 41 tasks at 1366x900 the document scrolls, and no box
inside it scrolls up and down of its own (before, the grid sat in a box 70 % of the window high:
10 of 41 tasks in view, two scrollbars). At phone width the grid's box may scroll sideways, but
nothing makes the page wider than the window."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_core import TaskDefinition
from scheduler_core.db import close_engine, create_engine
from scheduler_core.db.tables import executions
from scheduler_core.store import TaskRepository
from tests.browser.conftest import Dashboard, Screens, login
from tests.helpers.journal import db_now, execution_row, insert_rows

TASKS = 41
STATUSES = ("success", "failed", "unknown", "skipped", "missed")

# Every element whose content is taller than its box and that would scroll it (overflow-y auto
# or scroll): a scrollbar of its own. The document's scrolling element is the one allowed.
VERTICAL_SCROLLERS = """() => [...document.querySelectorAll('body, body *')]
  .filter(e => e !== document.scrollingElement && e.scrollHeight > e.clientHeight + 1
               && ['auto', 'scroll'].includes(getComputedStyle(e).overflowY))
  .map(e => `${e.tagName}.${e.className} ${e.scrollHeight}>${e.clientHeight}`)"""
# Elements reaching past the window's right edge, outside a box that scrolls sideways (whose
# overflow is clipped and reached by scrolling it).
TOO_WIDE = """() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
  .filter(e => { for (let p = e.parentElement; p; p = p.parentElement) {
                   if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(p).overflowX)) {
                     return p.getBoundingClientRect().right > window.innerWidth + 1; } }
                 return true; })
  .slice(0, 5).map(e => `${e.tagName}.${e.className} ${Math.round(e.getBoundingClientRect().right)}`)"""


@pytest.fixture(scope="module")
def grid_tasks(dashboard: Dashboard) -> list[str]:
    """41 tasks, each with 20 runs in the journal."""
    engine = create_engine(dashboard.database_url)
    try:
        tasks = TaskRepository(engine)
        ids = [f"grid-task-{i:02d}" for i in range(TASKS)]
        for task_id in ids:
            tasks.insert(TaskDefinition(id=task_id, name=f"Grid task number {task_id[-2:]}", cron="*/5 * * * *"))
        now = db_now(engine)
        insert_rows(engine, executions, [execution_row(f"{task_id}-run-{n:02d}", now - (20 - n) * 60_000,
                                                       STATUSES[n % len(STATUSES)], task_id)
                                         for task_id in ids for n in range(20)])
        return ids
    finally:
        close_engine(engine)


def _open_grid(browser: Any, dashboard: Dashboard, width: int, height: int) -> tuple[Any, Any]:
    context = browser.new_context(viewport={"width": width, "height": height}, timezone_id="Europe/Berlin")
    context.set_default_timeout(15_000)
    page = context.new_page()
    login(page, dashboard)
    page.goto(dashboard("/runs/?q=grid-task"))
    return context, page


def test_the_page_scrolls_not_a_box_inside_it(browser: Any, dashboard: Dashboard, grid_tasks: list[str],
                                              shot: Screens) -> None:
    context, page = _open_grid(browser, dashboard, 1366, 900)
    try:
        assert page.locator(".run-grid tbody tr").count() == TASKS
        shot(page, "runs-1366x900")
        sizes = page.evaluate("[document.scrollingElement.scrollHeight, window.innerHeight]")
        assert sizes[0] > sizes[1], f"the document does not scroll: {sizes}"
        assert page.evaluate(VERTICAL_SCROLLERS) == []
        # The last task is reached by scrolling the page.
        last = page.locator(".run-grid tbody tr").last
        last.scroll_into_view_if_needed()
        assert page.evaluate("window.scrollY") > 0
        box = last.bounding_box()
        assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 900
    finally:
        context.close()


def test_at_phone_width_nothing_is_wider_than_the_window(browser: Any, dashboard: Dashboard,
                                                         grid_tasks: list[str], shot: Screens) -> None:
    context, page = _open_grid(browser, dashboard, 390, 844)
    try:
        assert page.locator(".run-grid tbody tr").count() == TASKS
        shot(page, "runs-390x844")
        assert page.evaluate("[document.documentElement.scrollWidth <= window.innerWidth]") == [True]
        assert page.evaluate(TOO_WIDE) == []
        assert page.evaluate(VERTICAL_SCROLLERS) == []
    finally:
        context.close()
