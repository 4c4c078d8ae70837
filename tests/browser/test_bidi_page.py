"""What Chromium draws for a name holding a right-to-left override (U+202E): the page's own text
after the name stays in reading order. Without isolation the override runs to the end of the
line, so the task's "enabled" badge was drawn left of its id. The markup is checked page by page
in tests/webapp/test_bidi.py."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from scheduler_core import TaskDefinition
from scheduler_core.db import close_engine, create_engine
from scheduler_core.store import TaskRepository
from tests.browser.conftest import Dashboard, Screens, login

RLO = "\u202e"
TASK = f"invoice-{RLO}exe.txt"
NAME = f"Invoice {RLO}exe.txt"

LEFTS = """selectors => selectors.map(s => {
  const el = document.querySelector(s);
  return el ? Math.round(el.getBoundingClientRect().left) : null;
})"""


@pytest.fixture(scope="module")
def spoofed_task(dashboard: Dashboard) -> str:
    engine = create_engine(dashboard.database_url)
    try:
        TaskRepository(engine).insert(TaskDefinition(id=TASK, name=NAME, cron="0 2 * * *"))
    finally:
        close_engine(engine)
    return TASK


def test_the_heading_after_a_spoofing_name_stays_in_order(page: Any, dashboard: Dashboard, spoofed_task: str,
                                                          shot: Screens) -> None:
    login(page, dashboard)
    page.goto(dashboard(f"/tasks/view/{quote(spoofed_task)}"))
    shot(page, "task-with-rlo-name")
    heading, task_id, badge = page.evaluate(LEFTS, ["h1", "h1 code", "h1 .badge"])
    assert None not in (heading, task_id, badge)
    # The name first, then the id, then the badge: left to right, as written.
    assert heading < task_id < badge, f"heading drawn out of order: id at {task_id}, badge at {badge}"

