"""Run history at a glance (/runs/): the last 20 occurrences per task, newest right, coloured and
lettered, each a link to its execution; paged over tasks with the task search; two statements
a page (one read of every task's runs: tests/integration/test_run_grid_read.py). On SQLite,
PostgreSQL and MariaDB."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import event
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.db.tables import executions
from tests.helpers.journal import execution_row, insert_rows
from tests.webapp.conftest import Auth
from webapp.node import scheduler_of

STATUSES = ("success", "failed", "unknown", "skipped", "missed", "interrupted", "discarded")
HOSTILE = '<img src=x onerror="alert(1)">'


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def _journal(engine: Engine, task_id: str, count: int, start: int = 1_700_000_000_000) -> list[str]:
    """``count`` journal rows of ``task_id``, a minute apart, statuses in turn; their ids oldest first.
    Every second pair shares its created_at: the occurrence id breaks the tie."""
    rows = [execution_row(f"{task_id}-{i:03d}", start + (i // 2) * 60_000, STATUSES[i % len(STATUSES)], task_id)
            for i in range(count)]
    insert_rows(engine, executions, rows)
    return [row["occurrence_id"] for row in rows]


def _cells(page: str, task_id: str) -> list[tuple[str, str, str]]:
    """(status class, occurrence id, letter) of each cell in the task's row, left to right."""
    start = page.index(f'href="/tasks/view/{task_id}"')
    row = page[start:page.index("</tr>", start)]
    return re.findall(r'class="run-cell run-(\w+)" href="/executions/view/([^"]+)"[^>]*>(\w)</a>', row)


def test_the_grid_shows_the_last_twenty_runs_newest_right(db_app: Flask) -> None:
    engine = db_app.extensions["hai_engine"]
    scheduler = scheduler_of(db_app)
    for task_id, name in (("alpha", "Alpha"), ("beta", HOSTILE), ("gamma", "Gamma")):
        scheduler.register(TaskDefinition(id=task_id, name=name, cron="0 2 * * *"))
    alpha = _journal(engine, "alpha", 25)
    beta = _journal(engine, "beta", 3)
    client = db_app.test_client()
    Auth(client).login()
    response = client.get("/runs/")
    page = response.get_data(as_text=True)
    assert response.status_code == 200 and '<a href="/runs/"' in page  # in the navigation
    cells = _cells(page, "alpha")
    assert [occurrence for _, occurrence, _ in cells] == alpha[-20:]  # the newest 20, oldest to newest
    letters = {"success": "S", "failed": "F", "unknown": "U", "skipped": "K", "missed": "M", "interrupted": "I",
               "discarded": "D"}
    assert all(letters[status] == letter for status, _, letter in cells)  # readable without colour
    assert [occurrence for _, occurrence, _ in _cells(page, "beta")] == beta
    start = page.index('href="/tasks/view/gamma"')
    assert "never run" in page[start:page.index("</tr>", start)]
    for status, letter in letters.items():  # the legend
        assert f'<span class="run-cell run-{status}" aria-hidden="true">{letter}</span> {status}</li>' in page
    assert HOSTILE not in page and "&lt;img src=x" in page
    assert client.get(f"/executions/view/{alpha[-1]}").status_code == 200  # each cell opens its execution


def test_the_grid_pages_over_tasks_with_the_task_search(db_app: Flask) -> None:
    engine = db_app.extensions["hai_engine"]
    scheduler = scheduler_of(db_app)
    for i in range(55):
        scheduler.register(TaskDefinition(id=f"job-{i:02d}", name=f"Job {i}", cron="0 2 * * *"))
    scheduler.register(TaskDefinition(id="nightly-report", name="Report", cron="0 3 * * *"))
    _journal(engine, "job-54", 2)
    client = db_app.test_client()
    Auth(client).login()
    first = client.get("/runs/").get_data(as_text=True)
    assert len(re.findall(r'<th scope="row">', first)) == 50
    after = re.search(r'href="/runs/\?after=([^"]+)"', first)
    assert after and after.group(1) == "job-49"
    second = client.get(f"/runs/?after={after.group(1)}").get_data(as_text=True)
    ids = re.findall(r'<th scope="row"><a href="/tasks/view/([^"]+)"', second)
    assert ids == [*(f"job-{i}" for i in range(50, 55)), "nightly-report"]
    assert len(_cells(second, "job-54")) == 2
    back = re.search(r'href="/runs/\?before=([^"]+)"', second)
    assert back and len(re.findall(r'<th scope="row">', client.get(f"/runs/?before={back.group(1)}")
                                   .get_data(as_text=True))) == 50
    searched = client.get("/runs/?q=nightly", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert "<html" not in searched and re.findall(r'<th scope="row"><a href="/tasks/view/([^"]+)"', searched) == [
        "nightly-report"]
    bad = client.get("/runs/?q=status:bogus")
    assert bad.status_code == 400 and "status" in bad.get_data(as_text=True)


def test_a_page_is_two_statements(db_app: Flask) -> None:
    engine = db_app.extensions["hai_engine"]
    scheduler = scheduler_of(db_app)
    for i in range(30):
        scheduler.register(TaskDefinition(id=f"t-{i:02d}", name="T", cron="0 2 * * *"))
        _journal(engine, f"t-{i:02d}", 22)
    with statements(engine) as seen:
        grid = scheduler.task_ops.grid("", limit=25, runs=20)
    assert len(grid.rows) == 25 and all(len(row.runs) == 20 for row in grid.rows)
    selects = [s for s in seen if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 2, selects
    assert sum("UNION ALL" in s.upper() for s in selects) == 1  # one read of every task's runs


def test_the_new_pages_need_a_login(app: Flask, client: FlaskClient) -> None:
    for path in ("/runs/", "/executions/view/x", "/executions/unknown/bulk"):
        answer = client.get(path)
        assert answer.status_code == 302 and answer.headers["Location"].startswith("/login"), path
