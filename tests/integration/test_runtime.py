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
