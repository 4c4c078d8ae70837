"""The node runtime on every database: cron firing, refresh, cancellation, heartbeat, retention."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.db.tables import nodes, tasks
from scheduler_core.errors import InvalidStoredValueError
from scheduler_core.runtime import housekeeping
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.helpers.journal import enter_minute, wait_for_status


def _wait(predicate: Any, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_cron_fires_once_per_minute(engine: Engine, make_node: Any) -> None:
    seen: list[Any] = []
    node = make_node(hooks={"on_task_execute": lambda e: seen.append(e.context) or "ok"})
    node.register(TaskDefinition(id="minutely", name="Minutely", cron="* * * * *"))
    enter_minute(engine)  # start 5 s into a DB minute, so exactly one minute is current
    node.start()
    _wait(lambda: len(seen) == 1)  # the current minute counts once at start
    time.sleep(0.5)
    assert len(seen) == 1  # ticks within the same minute do not fire again
    set_clock_offset(engine, clock_offset(engine) + 60_000)  # the DB clock reaches the next minute
    _wait(lambda: len(seen) == 2)
    first, second = seen
    assert second.scheduled_minute - first.scheduled_minute == 60_000
    assert first.occurrence_id != second.occurrence_id and first.trigger == "cron"


def test_refresh_shares_one_read_and_keeps_the_last_good_snapshot(engine: Engine, make_node: Any) -> None:
    node = make_node()
    node.register(TaskDefinition(id="a", name="A", cron="0 2 * * *"))
    reads: list[str] = []

    def slow_task_reads(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM tasks ORDER BY" in statement:
            reads.append(statement)
            time.sleep(0.3)

    event.listen(engine, "before_cursor_execute", slow_task_reads)
    try:
        threads = [threading.Thread(target=node.refresh_tasks) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        event.remove(engine, "before_cursor_execute", slow_task_reads)
    assert len(reads) == 1
    with engine.begin() as conn:
        conn.execute(tasks.insert().values(id="broken", name="B", cron="not cron", timezone="UTC", enabled=True,
                                           delete_after_run=False, idempotent=False, revision=1, created_at=1,
                                           updated_at=1))
    with pytest.raises(InvalidStoredValueError):
        node.refresh_tasks()
    assert [t.id for t in node.tasks] == ["a"]


def _blocking_hook(entered: threading.Event, signals: list[str | None], occurrences: list[str]) -> Any:
    def execute(event: Any) -> Any:
        occurrences.append(event.context.occurrence_id)
        entered.set()
        event.signal.wait(20)
        signals.append(event.signal.reason)
        return "done"

    return execute


@pytest.mark.parametrize(("change", "reason"), [("unregister", "deleted"), ("disable", "disabled"),
                                                 ("reschedule", "rescheduled")])
def test_definition_changes_interrupt_a_running_cron_execution(engine: Engine, make_node: Any,
                                                              change: str, reason: str) -> None:
    entered, signals, occurrences = threading.Event(), [], []
    node = make_node(hooks={"on_task_execute": _blocking_hook(entered, signals, occurrences)})
    node.register(TaskDefinition(id="job", name="Job", cron="* * * * *"))
    node.start()
    assert entered.wait(15)
    if change == "unregister":
        node.unregister("job")
    elif change == "disable":
        node.update_task("job", enabled=False)
    else:
        node.update_task("job", cron="0 0 1 1 *")
    _wait(lambda: bool(signals))
    assert signals == [reason]
    done = wait_for_status(node, occurrences[0], "interrupted")
    assert done.reason == reason and done.attempts[-1].status == "interrupted"


def test_heartbeat_row_for_the_dashboard(engine: Engine, make_node: Any) -> None:
    node = make_node(node_id="beat-1")
    node.start()

    def row() -> Any:
        with engine.connect() as conn:
            found = conn.execute(select(nodes).where(nodes.c.node_id == "beat-1")).first()
            conn.rollback()
        return found

    _wait(lambda: row() is not None)
    assert row().stopped_at is None
    node.close()
    assert row().stopped_at is not None


def test_retention_prunes_logs_only(engine: Engine, make_node: Any) -> None:
    node = make_node(hooks={"on_task_execute": lambda e: "ok"}, max_logs=2, retention_days=1)
    node.register(TaskDefinition(id="job", name="Job", cron="0 2 * * *"))
    logs = [node.trigger("job") for _ in range(4)]
    assert node.prune_logs() == 2
    assert [entry.id for entry in node.get_logs()] == [logs[3].id, logs[2].id]
    set_clock_offset(engine, clock_offset(engine) + 2 * 86_400_000)  # two days later
    assert node.prune_logs() == 2 and node.get_logs() == []
    assert all(node.execution.get(entry.occurrence_id).status == "success" for entry in logs)  # journal kept


def test_get_logs_filters(engine: Engine, make_node: Any) -> None:
    def execute(event: Any) -> Any:
        if event.context.params.get("fail"):
            raise RuntimeError("bad")
        return "ok"

    node = make_node(hooks={"on_task_execute": execute})
    node.register(TaskDefinition(id="good", name="Good", cron="0 2 * * *"))
    node.register(TaskDefinition(id="bad", name="Bad", cron="0 2 * * *", params={"fail": True}))
    good = node.trigger("good", source="cli")
    bad = node.trigger("bad", source="api")
    assert [e.id for e in node.get_logs(status="failed")] == [bad.id]
    assert [e.id for e in node.get_logs(task_id="good")] == [good.id]
    assert [e.id for e in node.get_logs(trigger_source="api")] == [bad.id]
    assert good.started_at is not None
    assert {e.id for e in node.get_logs(started_after=good.started_at)} >= {good.id}
    assert node.get_logs(started_before=good.started_at) == []
    assert [e.id for e in node.get_logs(limit=1)] == [bad.id]
    assert [e.id for e in node.get_logs(limit=1, offset=1)] == [good.id]


def test_the_node_ticks_at_its_interval(make_node: Any) -> None:
    ticks: list[int] = []
    node = make_node(tick_interval_ms=250)
    node.add_tick_listener(ticks.append)
    node.start()
    time.sleep(2.6)
    node.stop()
    assert 5 <= len(ticks) <= 12, f"{len(ticks)} ticks in 2.6 s at 250 ms"
    assert ticks == sorted(ticks)  # each listener call gets the DB clock of its tick


def test_a_failing_tick_listener_spoils_neither_the_others_nor_the_tick(make_node: Any) -> None:
    seen: list[Any] = []
    ticks: list[int] = []

    def broken(now_ms: int) -> None:
        raise RuntimeError("listener bug")

    node = make_node(hooks={"on_task_execute": lambda e: seen.append(e.context) or "ok"})
    node.register(TaskDefinition(id="minutely", name="Minutely", cron="* * * * *"))
    node.add_tick_listener(broken)
    node.add_tick_listener(ticks.append)
    node.start()
    # at least one: started late in a minute, the node also runs the next minute's within the wait
    _wait(lambda: len(ticks) >= 3 and len(seen) >= 1)


@pytest.mark.parametrize("retention", [{"max_logs": 2}, {"retention_days": 1}])
def test_a_running_node_applies_log_retention_on_its_own(make_node: Any, engine: Engine,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           retention: dict[str, int]) -> None:
    """Retention is the node's housekeeping, every RETENTION_EVERY_S (ten minutes; one second
    here): either setting alone is enough."""
    monkeypatch.setattr(housekeeping, "RETENTION_EVERY_S", 1)
    node = make_node(hooks={"on_task_execute": lambda e: "ok"}, **retention)
    node.register(TaskDefinition(id="job", name="Job", cron="0 2 * * *"))
    logs = [node.trigger("job") for _ in range(4)]
    assert len(node.get_logs()) == 4
    if "retention_days" in retention:
        set_clock_offset(engine, clock_offset(engine) + 2 * 86_400_000)  # two days later
    node.start()
    kept = [logs[3].id, logs[2].id] if "max_logs" in retention else []
    _wait(lambda: [entry.id for entry in node.get_logs()] == kept)


def test_retention_runs_once_per_period_not_every_tick(engine: Engine, make_node: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(housekeeping, "RETENTION_EVERY_S", 1)
    deletes: list[float] = []

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE FROM LOGS"):
            deletes.append(time.monotonic())

    event.listen(engine, "before_cursor_execute", count)
    try:
        ticks: list[int] = []
        node = make_node(retention_days=1)  # ticks every 100 ms
        node.add_tick_listener(ticks.append)
        node.start()
        time.sleep(2.6)
        node.stop()
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert len(ticks) >= 10
    assert 1 <= len(deletes) <= 3, f"{len(deletes)} retention passes in 2.6 s, one a second"
