"""Journal retention on every database: which finished occurrences leave the journal (with their
attempt logs), in batches, and what always stays (docs/semantics.md, "Journal retention")."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import event, func, select, text, update
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.db.tables import executions, logs, slots
from scheduler_core.errors import ConfigError
from scheduler_core.runtime import housekeeping
from scheduler_core.store import logs as logs_module
from scheduler_core.store import retention as retention_module
from scheduler_core.store.retention import KEY_DAYS_MIN, JournalRetention, PruneResult
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.helpers.journal import execution_row, insert_rows

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


# --- a long backlog: each batch reads on from where the last one ended -------------------


def _old_rows(engine: Engine, count: int, tie: int = 1, start: int = 1_600_000_000_000,
              statuses: tuple[str, ...] = ("success",)) -> list[str]:
    """``count`` finished journal rows years old, ``tie`` of them at a time sharing one
    ``updated_at`` (a group commit stamps its rows with one millisecond), statuses in turn."""
    ids = [f"old-{i:06d}" for i in range(count)]
    for low in range(0, count, 2_000):
        insert_rows(engine, executions, (execution_row(ids[i], start + (i // tie) * 1_000, statuses[i % len(statuses)])
                                         for i in range(low, min(count, low + 2_000))))
    return ids


def _read_work(conn: Any, statement: str, parameters: Any) -> int:
    """What the database reports it did to answer one read, run again on the reader's own
    connection and transaction just before it: PostgreSQL's buffers (pages hit or read,
    ``EXPLAIN (ANALYZE, BUFFERS)``), MariaDB's handler reads (index entries and rows), SQLite's
    virtual-machine steps (in hundreds, its progress handler)."""
    raw = conn.connection.dbapi_connection
    cursor = raw.cursor()
    try:
        if conn.dialect.name == "postgresql":
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, parameters)
            plan = cursor.fetchone()[0][0]["Plan"]
            return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))
        if conn.dialect.name == "mysql":
            def counters() -> int:
                cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%'")
                return sum(int(value) for name, value in cursor.fetchall() if name != "Handler_read_rnd_deleted")

            first = counters()
            itself = counters() - first  # what reading the counters adds to them
            before = counters()
            cursor.execute(statement, parameters)
            cursor.fetchall()
            return counters() - before - itself
        steps = [0]

        def step() -> int:
            steps[0] += 1
            return 0

        raw.set_progress_handler(step, 100)
        try:
            cursor.execute(statement, parameters)
            cursor.fetchall()
        finally:
            raw.set_progress_handler(None, 100)
        return steps[0]
    finally:
        cursor.close()


def _reads_work(engine: Engine, batch: Callable[[], int]) -> tuple[int, int]:
    """What ``batch()`` returned (journal rows deleted), and the work of the journal reads it ran."""
    work = [0]

    def measure(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        text_ = " ".join(statement.split()).upper()
        if text_.startswith("SELECT") and "FROM EXECUTIONS" in text_ and "LIMIT" in text_:
            work[0] += _read_work(conn, statement, parameters)

    event.listen(engine, "before_cursor_execute", measure)
    try:
        deleted = batch()
    finally:
        event.remove(engine, "before_cursor_execute", measure)
    return deleted, work[0]


def _from_the_oldest_row(engine: Engine, batch_rows: int) -> Callable[[], int]:
    """A batch of a retention with no position (a new pass), rolled back."""
    def batch() -> int:
        with engine.connect() as conn:
            found = conn.begin()
            try:
                return JournalRetention(engine)._batch(conn, 30, batch_rows).deleted
            finally:
                found.rollback()

    return batch


def test_a_batch_late_in_a_long_backlog_reads_no_more_than_the_first(engine: Engine) -> None:
    """Deleted rows stay in the table and its indexes until the database cleans up (PostgreSQL's
    vacuum): a batch that read from the oldest end again passed over every row the batches before
    it deleted, and a backlog's drain grew with its square. Each batch reads on from where the
    last one ended, through the creation-order index whatever the planner would prefer."""
    batch = 100
    _old_rows(engine, 24_000, tie=7)
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("ANALYZE executions"))
    retention = JournalRetention(engine)
    deleted, first = _reads_work(engine, lambda: retention.prune(30, max_batches=1, batch_rows=batch).journal)
    assert deleted == batch
    assert retention.prune(30, max_batches=230, batch_rows=batch) == PruneResult(journal=230 * batch, more=True)
    oldest_deleted, from_oldest = _reads_work(engine, _from_the_oldest_row(engine, batch))
    deleted, late = _reads_work(engine, lambda: retention.prune(30, max_batches=1, batch_rows=batch).journal)
    assert deleted == oldest_deleted == batch
    assert late <= 2 * first + 10, f"the first batch's reads took {first}, one after 23,100 deleted rows {late}"
    # and each batch's read is about its own rows, not the table: pages (PostgreSQL: an index
    # entry, its row, a slot probe), handler reads (MariaDB), hundreds of VM steps (SQLite)
    per_row = {"postgresql": 3, "mysql": 3, "sqlite": 1}[engine.dialect.name]
    assert max(first, late) <= per_row * batch, f"reads took {first} and {late} for {batch} rows"
    if engine.dialect.name == "postgresql":  # the deleted rows' index entries are still there
        assert 3 * late < from_oldest, f"from the position {late}, from the oldest row {from_oldest}"


def test_every_deletable_row_goes_in_passes_of_small_batches_ties_and_statuses_mixed(engine: Engine) -> None:
    """Ties on ``created_at`` across batch edges, every final status, rows that must stay, and a
    row held back (a slot pointed at it) deleted by the next pass once it is free."""
    statuses = ("success", "failed", "unknown", "skipped", "running", "missed", "interrupted", "discarded", "queued")
    ids = _old_rows(engine, 400, tie=13, statuses=statuses)
    kept = {i for n, i in enumerate(ids) if statuses[n % len(statuses)] in ("unknown", "running", "queued")}
    held = ids[1]  # failed, and a slot points at it
    with engine.begin() as conn:
        conn.execute(slots.insert().values(task_id="t", occurrence_id=held, updated_at=0))
    retention = JournalRetention(engine)
    results = []
    while not results or results[-1].more:
        results.append(retention.prune(30, max_batches=3, batch_rows=7))
    assert sum(r.journal for r in results) == len(ids) - len(kept) - 1
    assert _journaled(engine, ids) == kept | {held}
    with engine.begin() as conn:
        conn.execute(slots.delete())
    assert retention.prune(30, max_batches=3, batch_rows=7) == PruneResult(journal=1)
    assert _journaled(engine, ids) == kept
