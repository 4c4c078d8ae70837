"""The timeline page and the task page's duration chart: drawn for any signed-in user from the
stored tasks and the journal; a refused argument is named on the page with a 400."""

from __future__ import annotations

import dataclasses
import html
import re
import uuid

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from scheduler_core.db.tables import executions
from scheduler_core.store import TaskRepository
from tests.helpers.journal import execution_row, insert_rows
from tests.webapp.conftest import Auth
from webapp.duration_chart import percentile
from webapp.node import accounts_of, scheduler_of


@pytest.fixture
def viewer(app: Flask, client: FlaskClient) -> FlaskClient:
    accounts_of(app).create("viewer1", "viewer", generate_password_hash("viewer-password-1"))
    assert Auth(client).login("viewer1", "viewer-password-1").status_code == 302
    return client


def test_the_timeline_by_group_with_paused_and_excluded(app: Flask, viewer: FlaskClient) -> None:
    scheduler = scheduler_of(app)
    scheduler.register(TaskDefinition(id="hourly", name="Hourly", cron="0 * * * *"))
    scheduler.register(TaskDefinition(id="bill", name="Billing run", cron="*/30 * * * *", node_group="billing",
                                      calendar={"exclude": ["* * * * *"]}))
    scheduler.register(TaskDefinition(id="held", name="Held", cron="15 * * * *"))
    scheduler.pause("held", reason="maintenance", by="ann")
    scheduler.register(TaskDefinition(id="off", name="Off", cron="* * * * *", enabled=False))
    assert 'href="/timeline/"' in viewer.get("/").get_data(as_text=True)  # in the menu
    page = viewer.get("/timeline/")
    assert page.status_code == 200
    body = page.get_data(as_text=True)
    assert "Any node" in body and "Group <bdi>billing</bdi>" in body and "1 disabled, not shown" in body
    assert body.index("Hourly") < body.index("Billing run")  # any node first, then the groups
    assert re.search(r'aria-label="hourly: runs in 2[34] of 48 marks"', body)  # 23: the current hour's fire passed
    assert re.search(r'aria-label="bill: runs in 0 of 48 marks, excluded in 4[78]"', body), body
    assert re.search(r'aria-label="held: runs in 0 of 48 marks, paused in 2[34]"', body)
    assert "no run in this window" in body
    billing = viewer.get("/timeline/?group=billing&hours=6").get_data(as_text=True)
    assert "Billing run" in billing and "Hourly" not in billing and "of 72 marks" in billing
    zoom = re.search(r'href="(/timeline/\?hours=6&amp;start=\d+)"', body)
    assert zoom, "the axis's times zoom in"
    assert "of 72 marks" in viewer.get(html.unescape(zoom.group(1))).get_data(as_text=True)


@pytest.mark.parametrize(("query", "field"), [
    ("hours=5", "hours"), ("hours=x", "hours"), ("start=1", "start"), ("start=99999999999999999", "start"),
    ("page=0", "page"), ("page=3", "page"), ("q=" + "x" * 201, "q"),
])
def test_a_refused_argument_is_named(viewer: FlaskClient, app: Flask, query: str, field: str) -> None:
    scheduler_of(app).register(TaskDefinition(id="hourly", name="Hourly", cron="0 * * * *"))
    response = viewer.get(f"/timeline/?{query}")
    assert response.status_code == 400
    assert re.search(rf'role="alert">{field}: ', response.get_data(as_text=True)), response.get_data(as_text=True)


def test_the_duration_chart_marks_failures_and_percentiles(app: Flask, viewer: FlaskClient) -> None:
    scheduler = scheduler_of(app)
    scheduler.register(TaskDefinition(id="job", name="Job", cron="0 * * * *"))
    assert "No run yet" in viewer.get("/tasks/view/job").get_data(as_text=True)
    rows = []
    for i in range(120):  # the chart shows the newest 100
        status = "failed" if i % 10 == 0 else "success"
        started = 1_000_000 + i * 60_000
        attempt = {"log_id": str(uuid.uuid4()), "attempt": 1, "sequence": 1, "node_id": "n", "started_at": started,
                   "finished_at": started + 1000 * (i % 20 + 1), "status": status}
        rows.append({**execution_row(f"job-{i:03d}", started, status, task_id="job"), "attempts": [attempt]})
    insert_rows(scheduler.engine, executions, rows)
    body = viewer.get("/tasks/view/job").get_data(as_text=True)
    assert "Run durations, last 100 runs, oldest first" in body
    durations = [1000 * (i % 20 + 1) for i in range(20, 120)]
    assert percentile(durations, 0.5) == 10_000 and percentile(durations, 0.95) == 19_000
    assert "Median (p50) 10.0 s, p95 19.0 s, longest 20.0 s" in body
    assert body.count('class="dur-cross"') == 10 and "failed, interrupted or unknown (10)" in body


def test_a_task_another_process_stored_is_on_the_next_timeline(app: Flask, viewer: FlaskClient) -> None:
    """The page reads the definitions again only when the tasks version moved: one stored by
    another process (a tasks apply, another worker) shows at once, one changed disappears."""
    scheduler_of(app).register(TaskDefinition(id="hourly", name="Hourly", cron="0 * * * *"))
    assert "Hourly" in viewer.get("/timeline/").get_data(as_text=True)
    other = TaskRepository(scheduler_of(app).engine)
    other.insert(TaskDefinition(id="from-elsewhere", name="From elsewhere", cron="*/15 * * * *"))
    body = viewer.get("/timeline/").get_data(as_text=True)
    assert "From elsewhere" in body and "Hourly" in body
    stored = other.get("hourly")
    assert stored is not None
    assert other.update(dataclasses.replace(stored, enabled=False), stored.revision) is not None
    body = viewer.get("/timeline/").get_data(as_text=True)
    assert "Hourly" not in body and "1 disabled, not shown" in body
