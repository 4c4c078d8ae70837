"""``/metrics``: who may scrape (token, address allow-list, trusted proxies), and every metric
family with the figures the database holds, on each database."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from scheduler_core import TaskDefinition
from scheduler_core.db import close_engine, create_engine
from scheduler_core.db.tables import executions, logs
from scheduler_core.errors import ConfigError
from scheduler_core.reach import Reach
from scheduler_core.runtime.metrics import METRIC_NAMES, Metrics
from scheduler_core.store import NodeRepository
from scheduler_core.store.reach_queue import QueueRepository
from tests.conftest import TestDatabase
from tests.helpers.journal import (
    abandon_running_execution,
    db_now,
    execution_row,
    insert_rows,
    journal_pending,
    wait_for_status,
)
from tests.webapp.conftest import ADMIN_PASSWORD, CONSOLE_REACH
from webapp import create_app

TOKEN = "metrics-token-" + "x" * 20
LOOPBACK, OUTSIDE = {"REMOTE_ADDR": "127.0.0.1"}, {"REMOTE_ADDR": "198.51.100.7"}


def _app(tmp_path: Path, **config: Any) -> Flask:
    return create_app({"DATABASE_URL": f"sqlite:///{tmp_path}/m.db", "ADMIN_PASSWORD": ADMIN_PASSWORD,
                       "TESTING": True, "SECRET_KEY": "m" * 40, **config})


def _close(app: Flask) -> None:
    app.extensions["hai_scheduler"].close()
    app.extensions["hai_reach"].close()
    close_engine(app.extensions["hai_engine"])


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[FlaskClient]:
    app = _app(tmp_path, METRICS_TOKEN=TOKEN, METRICS_ALLOW="10.0.0.0/8, ::1")
    yield app.test_client()
    _close(app)


def _scrape(client: FlaskClient, address: dict[str, str] = LOOPBACK, token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return client.get("/metrics", environ_base=address, headers=headers)


def families(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Each family's samples: {family: {sorted labels (with the sample name): value}}."""
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        samples = found.setdefault(family.name, {})
        for sample in family.samples:
            samples[(("__name__", sample.name), *sorted(sample.labels.items()))] = sample.value
    return found


def value(found: dict[str, Any], family: str, sample: str | None = None, **labels: str) -> float:
    """The one sample of ``family`` named ``sample`` with ``labels`` (a per-task series' ``team``
    label may be left out: there is one series per task)."""
    wanted = {"__name__": sample or family, **labels}
    matches = [v for key, v in found[family].items() if wanted.items() <= dict(key).items()]
    assert len(matches) == 1, (family, labels, sorted(found[family]))
    return float(matches[0])


# --- access --------------------------------------------------------------------------------


def test_the_right_token_is_let_in_from_anywhere(guarded: FlaskClient) -> None:
    response = _scrape(guarded, OUTSIDE, TOKEN)
    assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "hai_database_up 1.0" in response.get_data(as_text=True)


def test_a_wrong_token_is_refused_even_from_an_allowed_address(guarded: FlaskClient) -> None:
    for address in (OUTSIDE, {"REMOTE_ADDR": "10.1.2.3"}):
        response = _scrape(guarded, address, TOKEN + "x")
        assert response.status_code == 401 and "hai_" not in response.get_data(as_text=True)
        assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_without_a_token_only_allowed_addresses_read(guarded: FlaskClient) -> None:
    assert _scrape(guarded, {"REMOTE_ADDR": "10.1.2.3"}).status_code == 200
    assert _scrape(guarded, {"REMOTE_ADDR": "::1"}).status_code == 200
    refused = _scrape(guarded, OUTSIDE)
    assert refused.status_code == 401 and "hai_" not in refused.get_data(as_text=True)
    assert _scrape(guarded, LOOPBACK).status_code == 401  # the allow-list given replaces the loopback default


def test_by_default_loopback_reads_and_nobody_else(tmp_path: Path) -> None:
    app = _app(tmp_path)
    try:
        client = app.test_client()
        assert _scrape(client, LOOPBACK).status_code == 200
        assert _scrape(client, {"REMOTE_ADDR": "::ffff:127.0.0.1"}).status_code == 200
        outside = _scrape(client, OUTSIDE)
        assert outside.status_code == 403 and "HAI_METRICS_ALLOW" in outside.get_data(as_text=True)
        assert _scrape(client, LOOPBACK, "any-token-at-all-here").status_code == 401  # no token configured
        assert client.get("/", environ_base=LOOPBACK).status_code == 302  # the pages still need a login
    finally:
        _close(app)


def test_the_client_address_behind_trusted_proxies(tmp_path: Path) -> None:
    app = _app(tmp_path, TRUSTED_PROXIES=1, METRICS_ALLOW="192.0.2.0/24")
    try:
        client = app.test_client()
        via_proxy = {"REMOTE_ADDR": "127.0.0.1"}
        allowed = client.get("/metrics", environ_base=via_proxy, headers={"X-Forwarded-For": "192.0.2.9"})
        denied = client.get("/metrics", environ_base=via_proxy, headers={"X-Forwarded-For": "198.51.100.7"})
        assert (allowed.status_code, denied.status_code) == (200, 403)
    finally:
        _close(app)


@pytest.mark.parametrize(("config", "field"), [
    ({"METRICS_ALLOW": "10.0.0.0/33"}, "HAI_METRICS_ALLOW"),
    ({"METRICS_ALLOW": "localhost"}, "HAI_METRICS_ALLOW"),
    ({"METRICS_TOKEN": "short"}, "HAI_METRICS_TOKEN"),
    ({"METRICS_TOKEN": "has a space in it, so no"}, "HAI_METRICS_TOKEN"),
])
def test_a_bad_setting_is_refused_by_name(tmp_path: Path, config: dict[str, str], field: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _app(tmp_path, **config)
    assert raised.value.field == field


# --- figures -------------------------------------------------------------------------------


def _states(app: Flask) -> dict[str, Any]:
    """Some of every state a metric counts, made the way the product makes them."""
    scheduler, engine = app.extensions["hai_scheduler"], app.extensions["hai_engine"]

    def run(event: Any) -> str:
        if event.task.id == "flaky":
            raise RuntimeError("boom")
        return "ok"

    scheduler.set_hooks({"on_task_execute": run})
    for task_id in ("report", "flaky", "billing", "paused", "disabled"):
        scheduler.register(TaskDefinition(id=task_id, name=task_id, cron="0 2 * * *", enabled=task_id != "disabled"))
    scheduler.pause("paused", reason="metrics test")
    for _ in range(2):
        scheduler.trigger("report")
    scheduler.trigger("flaky")
    unknown = abandon_running_execution(engine, "billing", started=True)
    scheduler.start()  # its expiry scan isolates the abandoned execution as unknown
    try:
        wait_for_status(scheduler, unknown, "unknown")
    finally:
        scheduler.stop()
    journal_pending(engine, 2)
    now = db_now(engine)
    minute = now - now % 60_000
    taken = execution_row(str(uuid.uuid4()), now, task_id="report") | {"sequence": 3, "trigger": "cron",
                                                                        "scheduled_minute": minute}
    insert_rows(engine, executions, [taken])
    insert_rows(engine, logs, [{"id": str(uuid.uuid4()), "occurrence_id": taken["occurrence_id"], "task_id": "report",
                                "trigger": "cron", "source": None, "status": "success", "sequence": 1, "attempt": 1,
                                "node_id": "n", "started_at": minute + 1_500, "finished_at": minute + 1_600,
                                "duration_ms": 100, "error": None, "result": None, "created_at": minute + 1_500}])
    NodeRepository(engine).heartbeat("node-a", "host-a", 1, last_tick_ms=42)
    queue = QueueRepository(engine, "test", 60_000)
    for recipient in ("bad\x01recipient", "ops@example.com"):  # the console refuses a control character: dead
        queue.enqueue(str(uuid.uuid4()), "log", None, recipient, "Subject", "body", {}, (1, 1_000, 4_000), None)
    queue.enqueue(str(uuid.uuid4()), "log", None, "later", "Subject", "body", {}, (1, 1_000, 4_000), now + 3_600_000)
    rounds = Reach(engine, CONSOLE_REACH, node_id="rounds", auto_migrate=False)
    rounds.init()
    try:
        rounds.run_round()
    finally:
        rounds.close()
    return {"unknown": unknown}


def test_every_family_with_the_figures_the_database_holds(db_app: Flask, database: TestDatabase) -> None:
    _states(db_app)
    client = db_app.test_client()
    text = _scrape(client).get_data(as_text=True)
    found = families(text)
    assert set(METRIC_NAMES) <= set(found), sorted(set(METRIC_NAMES) - set(found))
    assert value(found, "hai_database_up") == 1
    assert value(found, "hai_executions_last_24h", task="report", status="success") == 3
    assert value(found, "hai_executions_last_24h", task="flaky", status="failed") == 1
    assert value(found, "hai_executions_last_24h", task="billing", status="unknown") == 1
    assert value(found, "hai_lease_takeovers_last_24h") == 2  # the row at sequence 3
    assert value(found, "hai_executions_open", status="unknown") == 1
    assert value(found, "hai_executions_open", status="running") == 0
    assert (value(found, "hai_tasks"), value(found, "hai_tasks_paused"), value(found, "hai_tasks_disabled"),
            value(found, "hai_tasks_blocked"), value(found, "hai_tasks_managed")) == (5, 1, 1, 1, 0)
    assert value(found, "hai_log_writes_pending") == 2
    assert value(found, "hai_notification_dead_letters") == 1
    assert value(found, "hai_notification_queue", status="dead") == 1
    assert value(found, "hai_notification_queue", status="pending") == 1  # the one due in an hour
    assert value(found, "hai_notification_deliveries_last_24h", provider="log", outcome="sent") == 1
    assert value(found, "hai_notification_deliveries_last_24h", provider="log", outcome="dead") == 1
    assert 0 <= value(found, "hai_node_heartbeat_age_seconds", node="node-a", stopped="false") < 60
    assert value(found, "hai_node_tick_duration_seconds", node="node-a") == pytest.approx(0.042)
    window = "hai_fire_lateness_last_hour_occurrences"  # the rows inserted above: the window reads the journal
    assert value(found, window, within_seconds="1.0") == 0
    assert value(found, window, within_seconds="2.5") == 1
    assert value(found, window, within_seconds="+Inf") == 1
    # The counters count what the product committed (the rows inserted above went around it):
    assert value(found, "hai_executions", "hai_executions_total", task="report", status="success") == 2
    assert value(found, "hai_executions", "hai_executions_total", task="flaky", status="failed") == 1
    assert value(found, "hai_executions", "hai_executions_total", task="billing", status="unknown") == 1
    assert value(found, "hai_notification_deliveries", "hai_notification_deliveries_total", provider="log",
                 outcome="sent") == 1
    assert value(found, "hai_fire_lateness_seconds", "hai_fire_lateness_seconds_count") == 0  # no cron attempt


def test_task_series_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("scheduler_core.runtime.metrics.MAX_TASK_SERIES", 2)
    app = _app(tmp_path)
    try:
        now = db_now(app.extensions["hai_engine"])
        rows = [execution_row(str(uuid.uuid4()), now, task_id=task) for task, count in
                (("a", 3), ("b", 2), ("c", 1), ("d", 1)) for _ in range(count)]
        insert_rows(app.extensions["hai_engine"], executions, rows)
        found = families(_scrape(app.test_client()).get_data(as_text=True))
        series = {dict(labels[1:])["task"]: v for labels, v in found["hai_executions_last_24h"].items()}
        assert series == {"a": 3, "b": 2, "_other": 2}
    finally:
        _close(app)



def test_a_database_that_does_not_answer_is_reported_not_raised(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path}/no-schema.db")  # no tables: every statement fails
    try:
        found = families(Metrics(engine).render().decode())
    finally:
        close_engine(engine)
    assert found == {"hai_database_up": {(("__name__", "hai_database_up"),): 0.0}}
