"""``/metrics`` under the real server: `hai-scheduler serve` with two gunicorn workers. The figures
come from the database, not from a worker's memory, so scrapes answered by either worker agree;
both workers' nodes report their heartbeats and tick durations."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from scheduler_core import Scheduler, TaskDefinition
from scheduler_core.db import DatabaseConfig, close_engine, create_engine, upgrade
from scheduler_core.runtime.metrics import METRIC_NAMES
from tests.helpers.served import serve
from tests.webapp.test_metrics import families
from tests.webapp.test_metrics_counters import assert_never_lower, counters

pytestmark = pytest.mark.slow
TOKEN = "worker-metrics-token-0123456789"
# Families whose figures depend on the database only (not on the moment a scrape reads them).
STABLE = ("hai_database_up", "hai_executions_last_24h", "hai_tasks", "hai_tasks_paused", "hai_tasks_disabled",
          "hai_tasks_blocked", "hai_notification_queue", "hai_fire_lateness_seconds")


def _prepare(url: str) -> None:
    engine = create_engine(DatabaseConfig.from_env({"HAI_DATABASE_URL": url}))
    try:
        upgrade(engine)
        scheduler = Scheduler(engine, hooks={"on_task_execute": lambda event: "ok"})
        scheduler.init()
        for task_id in ("a", "b", "c"):
            scheduler.register(TaskDefinition(id=task_id, name=task_id, cron="0 2 * * *", enabled=task_id != "c"))
        scheduler.pause("b", reason="metrics test")
        scheduler.trigger("a")
        scheduler.close()
    finally:
        close_engine(engine)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path}/served.db"
    _prepare(url)
    env = {"HAI_DATABASE_URL": url, "HAI_ADMIN_PASSWORD": "first admin pw", "HAI_THREADS": "2",
           "HAI_METRICS_TOKEN": TOKEN, "HAI_METRICS_ALLOW": "none"}
    with serve(tmp_path, env) as base:
        yield base


def _scrape(base: str, token: str | None = TOKEN) -> requests.Response:
    headers = {"Connection": "close"}  # a new connection each time: either worker may answer
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return requests.get(f"{base}/metrics", headers=headers, timeout=10)


def test_every_worker_answers_every_family_alike(served: str) -> None:
    assert _scrape(served, None).status_code == 401  # HAI_METRICS_ALLOW=none: the token only, loopback too
    deadline = time.monotonic() + 40
    while True:  # both workers' nodes have sent a heartbeat with their previous tick's duration
        found = families(_scrape(served).text)
        if len(found["hai_node_tick_duration_seconds"]) == 2:
            break
        assert time.monotonic() < deadline, found["hai_node_tick_duration_seconds"]
        time.sleep(0.5)
    assert len(found["hai_node_heartbeat_age_seconds"]) == 2
    seen = []
    for _ in range(10):
        response = _scrape(served)
        assert response.status_code == 200
        scrape = families(response.text)
        assert set(METRIC_NAMES) <= set(scrape), sorted(set(METRIC_NAMES) - set(scrape))
        seen.append({name: scrape[name] for name in STABLE})
        assert len(scrape["hai_node_heartbeat_age_seconds"]) == 2
    assert all(figures == seen[0] for figures in seen), "scrapes disagree"
    first = seen[0]
    assert first["hai_tasks"] == {(("__name__", "hai_tasks"),): 3.0}
    assert first["hai_tasks_paused"] == {(("__name__", "hai_tasks_paused"),): 1.0}
    assert first["hai_tasks_disabled"] == {(("__name__", "hai_tasks_disabled"),): 1.0}
    assert first["hai_executions_last_24h"] == {
        (("__name__", "hai_executions_last_24h"), ("status", "success"), ("task", "a"), ("team", "default")): 1.0}


def test_no_counter_goes_down_across_both_workers_and_a_restart(tmp_path: Path) -> None:
    """Scrapes answered by either worker while executions commit, then by a restarted server:
    every counter series, from one scrape to the next, stays or grows."""
    url = f"sqlite:///{tmp_path}/served.db"
    _prepare(url)
    env = {"HAI_DATABASE_URL": url, "HAI_ADMIN_PASSWORD": "first admin pw", "HAI_THREADS": "2",
           "HAI_METRICS_TOKEN": TOKEN, "HAI_METRICS_ALLOW": "none"}
    engine = create_engine(DatabaseConfig.from_env({"HAI_DATABASE_URL": url}))
    scheduler = Scheduler(engine, hooks={"on_task_execute": lambda event: "ok"})
    scheduler.init()
    scrapes = []
    try:
        for _ in range(2):  # the server, then the server restarted
            with serve(tmp_path, env) as base:
                for _ in range(5):
                    scheduler.trigger("a")  # committed between scrapes, by another process
                    for _ in range(2):  # a new connection each time: either worker may answer
                        scrapes.append(counters(families(_scrape(base).text)))
            scheduler.trigger("a")  # while no server runs
    finally:
        scheduler.close()
        close_engine(engine)
    for before, after in itertools.pairwise(scrapes):
        assert_never_lower(before, after)
    key = (("family", "hai_executions"), ("__name__", "hai_executions_total"), ("status", "success"), ("task", "a"),
           ("team", "default"))
    assert [scrape[key] for scrape in scrapes[::2]] == [float(n) for n in (*range(2, 7), *range(8, 13))]
