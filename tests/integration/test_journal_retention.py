"""Journal retention on every database: which finished occurrences leave the journal (with their
attempt logs), in batches, and what always stays (docs/semantics.md, "Journal retention")."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import event, func, select, update
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.db.tables import executions, logs, slots
from scheduler_core.errors import ConfigError
from scheduler_core.runtime import housekeeping
from scheduler_core.store import logs as logs_module
from scheduler_core.store import retention as retention_module
from scheduler_core.store.retention import KEY_DAYS_MIN, JournalRetention, PruneResult
from scheduler_core.testing import clock_offset, set_clock_offset

DAY_MS = 86_400_000
MakeScheduler = Callable[..., Scheduler]


def _node(make_node: MakeScheduler, runs: list[str] | None = None, **config: Any) -> Scheduler:
    def execute(event: Any) -> str:
        if runs is not None:
            runs.append(event.context.occurrence_id)
        return "ok"

    scheduler = make_node(hooks={"on_task_execute": execute}, **config)
    scheduler.register(TaskDefinition(id="job", name="Job", cron="0 2 * * *"))
    return scheduler


def _later(engine: Engine, days: float) -> None:
    set_clock_offset(engine, clock_offset(engine) + int(days * DAY_MS))


def _journaled(engine: Engine, occurrence_ids: list[str]) -> set[str]:
    with engine.connect() as conn:
        found = set(conn.execute(select(executions.c.occurrence_id)
                                 .where(executions.c.occurrence_id.in_(occurrence_ids))).scalars())
        conn.rollback()
    return found


def _log_count(engine: Engine, occurrence_id: str) -> int:
    with engine.connect() as conn:
        count = conn.execute(select(func.count()).select_from(logs).where(logs.c.occurrence_id == occurrence_id))
        value = int(count.scalar_one())
        conn.rollback()
    return value


def _set(engine: Engine, occurrence_id: str, **values: Any) -> None:
    with engine.begin() as conn:
        conn.execute(update(executions).where(executions.c.occurrence_id == occurrence_id).values(**values))


def test_old_finished_rows_go_with_their_logs_and_nothing_else_does(make_node: MakeScheduler,
                                                                     engine: Engine) -> None:
    node = _node(make_node)
    plain, unknown, running, slotted, pending_logs, failed = (node.trigger("job").occurrence_id for _ in range(6))
    _set(engine, unknown, status="unknown")  # waits for an operator's verdict
    _set(engine, running, status="running")
    _set(engine, pending_logs, log_persistence="pending")  # a repair still owes its logs
    _set(engine, failed, status="failed")
    with engine.begin() as conn:  # a slot points at it (as it does at an unknown row)
        conn.execute(update(slots).where(slots.c.task_id == "job").values(occurrence_id=slotted))
    assert _log_count(engine, plain) == 1
    every = [plain, unknown, running, slotted, pending_logs, failed]
    _later(engine, 29.9)
    assert node.prune_journal() == PruneResult() and _journaled(engine, every) == set(every)  # too young
    _later(engine, 0.2)  # 30.1 days after their last change
    assert node.prune_journal() == PruneResult(journal=2, logs=2)
    assert _journaled(engine, every) == {unknown, running, slotted, pending_logs}
    assert _log_count(engine, plain) == 0 and _log_count(engine, failed) == 0 and _log_count(engine, unknown) == 1


def test_a_keyed_trigger_inside_its_period_still_answers_with_the_same_occurrence(make_node: MakeScheduler,
                                                                                   engine: Engine) -> None:
    runs: list[str] = []
    node = _node(make_node, runs, journal_retention_days=10)
    keyed = node.trigger("job", idempotency_key="invoice-2026-11").occurrence_id
    unkeyed = node.trigger("job").occurrence_id
    _later(engine, 11)  # past the unkeyed rows' 10 days, inside the key's 30
    assert node.prune_journal().journal == 1 and _journaled(engine, [keyed, unkeyed]) == {keyed}
    again = node.trigger("job", idempotency_key="invoice-2026-11")
    assert again.occurrence_id == keyed and runs == [keyed, unkeyed]  # answered, not run again
    _later(engine, KEY_DAYS_MIN - 11 + 0.1)  # the key's period is over
    assert node.prune_journal().journal == 1 and _journaled(engine, [keyed]) == set()


def test_retention_deletes_in_bounded_batches(make_node: MakeScheduler, engine: Engine) -> None:
    node = _node(make_node, journal_retention_days=8)
    ids = [node.trigger("job").occurrence_id for _ in range(5)]
    _later(engine, 9)
    retention = JournalRetention(engine)
    assert retention.prune(8, max_batches=2, batch_rows=2) == PruneResult(journal=4, logs=4, more=True)
    assert len(_journaled(engine, ids)) == 1
    assert retention.prune(8, max_batches=2, batch_rows=2) == PruneResult(journal=1, logs=1, more=False)


def test_a_running_node_applies_journal_retention_on_its_own(make_node: MakeScheduler, engine: Engine,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(housekeeping, "RETENTION_EVERY_S", 1)  # ten minutes in production
    node = _node(make_node, journal_retention_days=8)
    old = node.trigger("job").occurrence_id
    _later(engine, 9)
    node.start()
    deadline = time.monotonic() + 20
    while _journaled(engine, [old]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _journaled(engine, [old]) == set()


def test_journal_retention_none_keeps_everything(make_node: MakeScheduler, engine: Engine) -> None:
    node = _node(make_node, journal_retention_days=None)
    old = node.trigger("job").occurrence_id
    _later(engine, 400)
    assert node.prune_journal() == PruneResult() and _journaled(engine, [old]) == {old}


@pytest.mark.parametrize("bad", [0, 7, 36_501, -1, "30", 30.0, True])
def test_a_bad_journal_retention_is_refused_by_name(bad: Any) -> None:
    with pytest.raises(ConfigError) as info:
        SchedulerConfig(journal_retention_days=bad)
    assert info.value.field == "journal_retention_days"


def test_a_node_drains_a_journal_backlog_tick_after_tick(make_node: MakeScheduler, engine: Engine,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass that stops with rows still due (its batches full) is followed by another at the
    next tick, not ten minutes later: a backlog drains a few batches a tick."""
    monkeypatch.setattr(retention_module, "BATCH_ROWS", 1)
    monkeypatch.setattr(housekeeping, "JOURNAL_BATCHES_PER_TICK", 1)  # one row a tick
    monkeypatch.setattr(housekeeping, "RETENTION_EVERY_S", 3_600)  # the timer alone: one pass an hour
    node = _node(make_node, journal_retention_days=8)
    old = [node.trigger("job").occurrence_id for _ in range(5)]
    _later(engine, 9)
    node.start()
    running = node._node
    assert running is not None
    running._housekeeping._last_journal_retention = -1e12  # the first pass is due now
    deadline = time.monotonic() + 20
    while _journaled(engine, old) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _journaled(engine, old) == set()


@pytest.mark.parametrize("retention", [{"retention_days": 1}, {"max_logs": 1}])
def test_log_retention_deletes_in_bounded_batches(make_node: MakeScheduler, engine: Engine,
                                                  monkeypatch: pytest.MonkeyPatch, retention: dict[str, int]) -> None:
    monkeypatch.setattr(logs_module, "PRUNE_BATCH", 2)
    node = _node(make_node, **retention)
    made = [node.trigger("job") for _ in range(5)]
    _later(engine, 2)
    deleted: list[int] = []

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE FROM LOGS"):
            deleted.append(cursor.rowcount)

    event.listen(engine, "after_cursor_execute", count)
    try:
        pruned = node.prune_logs()
    finally:
        event.remove(engine, "after_cursor_execute", count)
    expected = 5 if "retention_days" in retention else 4
    assert pruned == expected and sum(deleted) == expected
    assert max(deleted) <= 2 and len(deleted) == expected // 2 + 1  # full batches, then a short one
    kept = [entry.id for entry in node.get_logs()]
    assert kept == ([] if "retention_days" in retention else [made[-1].id])
