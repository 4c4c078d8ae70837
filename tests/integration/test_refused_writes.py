"""Attempts whose writes the database refuses, on every database.

The lease keeper when renewals keep failing: a renewal that fails (the database answers with
an error, unlike a lost lease, which it answers with 0 rows) is retried; but once a whole lease
has passed since the last renewal that succeeded, another node may own the execution, so the
keeper cancels the attempt (``lease_lost``) and the runner publishes nothing. Here the database refuses every statement
about leases (the column is renamed away in the test's own database) while the handler runs,
so only the keeper's give-up path can stop the attempt.

A runner whose begin the database refuses (a trigger on the executions table): ``trigger()``
answers (unconfirmed), the handler never runs, and the runner settles, so ``close()`` returns.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from scheduler_core import TaskDefinition
from scheduler_core.db.engine import dialect_kind

LEASE_MS = 3000  # the keeper renews every second

# The lease column goes away, so every statement that names it fails whatever the row holds:
# the renewal (which a row-level refusal would stop reaching once the lease ran out in the
# database: its WHERE no longer matches the row, and 0 rows is the ordinary "lost" answer),
# and a terminal commit.
_HIDE = "ALTER TABLE executions RENAME COLUMN lease_until TO lease_until_hidden"
_SHOW = "ALTER TABLE executions RENAME COLUMN lease_until_hidden TO lease_until"


def _run(engine: Engine, statement: str) -> None:
    with engine.begin() as conn:
        conn.execute(text(statement))


def _lease_until(conn: Connection, occurrence_id: str) -> int:
    row = conn.execute(text("SELECT lease_until FROM executions WHERE occurrence_id = :o"),
                       {"o": occurrence_id}).one()
    return int(row.lease_until)


def test_renewals_that_keep_failing_cancel_the_attempt_after_one_lease(engine: Engine, make_node: Any) -> None:
    entered, cancelled = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def execute(event: Any) -> Any:
        seen["occurrence_id"] = event.context.occurrence_id
        entered.set()
        if event.signal.wait(60):
            seen["cancelled_at"], seen["reason"] = time.monotonic(), event.signal.reason
            cancelled.set()
        return {"published": True}

    node = make_node(hooks={"on_task_execute": execute}, lease_ms=LEASE_MS)
    node.register(TaskDefinition(id="job", name="Job", cron="0 2 * * *"))
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(node.trigger("job")))
    worker.start()
    assert entered.wait(15)
    # Renewals succeed for a lease and a half first: the keeper counts a lease from the last
    # renewal that succeeded, not from the start of the attempt.
    time.sleep(1.5 * LEASE_MS / 1000)
    assert not cancelled.is_set()
    with engine.connect() as conn:
        lease_before = _lease_until(conn, str(seen["occurrence_id"]))
        conn.rollback()
    _run(engine, _HIDE)
    refused_from = time.monotonic()
    shown = False
    try:
        assert cancelled.wait(15), "renewals failed for five leases and the attempt still runs"
        worker.join(20)
        _run(engine, _SHOW)
        shown = True
        waited = seen["cancelled_at"] - refused_from
        # The last good renewal was at most one interval (lease/3) before the refusals began.
        assert waited >= (LEASE_MS - LEASE_MS / 3) / 1000 - 0.2, f"gave up after {waited:.2f} s, before a lease"
        assert seen["reason"] == "lease_lost"
        (log,) = result
        assert log.persistence.status == "unconfirmed"
        occurrence_id = seen["occurrence_id"]
        execution = node.execution.get(occurrence_id)
        assert execution.status == "running"  # nothing published
        assert [(a.status, a.result) for a in execution.attempts] == [(None, None)]
        with engine.connect() as conn:  # no renewal after the refusals began (one may have run just before)
            assert _lease_until(conn, occurrence_id) <= lease_before + LEASE_MS / 3 + 500
            conn.rollback()
    finally:
        if not shown:
            _run(engine, _SHOW)



# Refuse an UPDATE that begins an attempt (the attempt number grows on a running execution).
_REFUSE_BEGIN = {
    "sqlite": ["""CREATE TRIGGER refuse_begin BEFORE UPDATE ON executions
                  WHEN NEW.status = 'running' AND NEW.attempt > OLD.attempt
                  BEGIN SELECT RAISE(ABORT, 'begin refused by the test'); END"""],
    "postgresql": ["""CREATE FUNCTION refuse_begin() RETURNS trigger LANGUAGE plpgsql AS $$
                      BEGIN
                        IF NEW.status = 'running' AND NEW.attempt > OLD.attempt THEN
                          RAISE EXCEPTION 'begin refused by the test';
                        END IF;
                        RETURN NEW;
                      END $$""",
                   """CREATE TRIGGER refuse_begin BEFORE UPDATE ON executions
                      FOR EACH ROW EXECUTE FUNCTION refuse_begin()"""],
    "mysql": ["""CREATE TRIGGER refuse_begin BEFORE UPDATE ON executions FOR EACH ROW
                 BEGIN
                   IF NEW.status = 'running' AND NEW.attempt > OLD.attempt THEN
                     SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'begin refused by the test';
                   END IF;
                 END"""],
}
_ALLOW_BEGIN = {
    "sqlite": ["DROP TRIGGER refuse_begin"],
    "postgresql": ["DROP TRIGGER refuse_begin ON executions", "DROP FUNCTION refuse_begin()"],
    "mysql": ["DROP TRIGGER refuse_begin"],
}


def test_a_begin_the_database_refuses_settles_the_runner(engine: Engine, make_node: Any) -> None:
    ran: list[Any] = []
    node = make_node(hooks={"on_task_execute": lambda event: ran.append(event) or "ok"})
    node.register(TaskDefinition(id="job", name="Job", cron="0 2 * * *"))
    kind = dialect_kind(engine)
    for statement in _REFUSE_BEGIN[kind]:
        _run(engine, statement)
    try:
        log = node.trigger("job")  # answers; the database error is not the caller's to catch
    finally:
        for statement in _ALLOW_BEGIN[kind]:
            _run(engine, statement)
    assert log.persistence.status == "unconfirmed" and ran == []
    assert node.execution.get(log.occurrence_id).attempts == ()  # no attempt began
    closing = threading.Thread(target=node.close)
    closing.start()
    closing.join(20)
    assert not closing.is_alive(), "close() waits for a runner that never settled"
