"""The lease keeper when renewals keep failing, on every database.

A renewal that fails (the database answers with an error, unlike a lost lease, which it answers
with 0 rows) is retried; but once a whole lease has passed since the last renewal that
succeeded, another node may own the execution, so the keeper cancels the attempt
(``lease_lost``) and the runner publishes nothing. The database here refuses the renewal's
UPDATE with a trigger: every other write (the claim, the begin, a terminal commit) still goes
through, so only the keeper's give-up path can stop the attempt.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from scheduler_core import TaskDefinition
from scheduler_core.db.engine import dialect_kind
from tests.helpers.journal import wait_for_status

LEASE_MS = 3000  # the keeper renews every second

# Refuse an UPDATE that only pushes a running execution's lease further: the renewal.
_REFUSE_RENEWAL = {
    "sqlite": ["""CREATE TRIGGER refuse_renewal BEFORE UPDATE OF lease_until ON executions
                  WHEN OLD.status = 'running' AND NEW.status = 'running' AND NEW.lease_until > OLD.lease_until
                  BEGIN SELECT RAISE(ABORT, 'renewal refused by the test'); END"""],
    "postgresql": ["""CREATE FUNCTION refuse_renewal() RETURNS trigger LANGUAGE plpgsql AS $$
                      BEGIN
                        IF OLD.status = 'running' AND NEW.status = 'running'
                           AND NEW.lease_until > OLD.lease_until THEN
                          RAISE EXCEPTION 'renewal refused by the test';
                        END IF;
                        RETURN NEW;
                      END $$""",
                   """CREATE TRIGGER refuse_renewal BEFORE UPDATE ON executions
                      FOR EACH ROW EXECUTE FUNCTION refuse_renewal()"""],
    "mysql": ["""CREATE TRIGGER refuse_renewal BEFORE UPDATE ON executions FOR EACH ROW
                 BEGIN
                   IF OLD.status = 'running' AND NEW.status = 'running' AND NEW.lease_until > OLD.lease_until THEN
                     SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'renewal refused by the test';
                   END IF;
                 END"""],
}
_ALLOW_RENEWAL = {
    "sqlite": ["DROP TRIGGER refuse_renewal"],
    "postgresql": ["DROP TRIGGER refuse_renewal ON executions", "DROP FUNCTION refuse_renewal()"],
    "mysql": ["DROP TRIGGER refuse_renewal"],
}


def _run(engine: Engine, statements: list[str]) -> None:
    with engine.begin() as conn:
        for statement in statements:
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
    kind = dialect_kind(engine)
    _run(engine, _REFUSE_RENEWAL[kind])
    refused_from = time.monotonic()
    with engine.connect() as conn:
        lease_before = _lease_until(conn, str(seen["occurrence_id"]))
        conn.rollback()
    try:
        assert cancelled.wait(15), "renewals failed for five leases and the attempt still runs"
        worker.join(20)
        waited = seen["cancelled_at"] - refused_from
        # The last good renewal was at most one interval (lease/3) before the refusals began.
        assert waited >= (LEASE_MS - LEASE_MS / 3) / 1000 - 0.2, f"gave up after {waited:.2f} s, before a lease"
        assert seen["reason"] == "lease_lost"
        (log,) = result
        assert log.persistence.status == "unconfirmed"
        occurrence_id = seen["occurrence_id"]
        execution = wait_for_status(node, occurrence_id, "running")  # nothing published
        assert execution.status == "running"
        assert all(attempt.status is None and attempt.result is None for attempt in execution.attempts)
        with engine.connect() as conn:
            assert _lease_until(conn, occurrence_id) == lease_before  # no renewal got through
            conn.rollback()
    finally:
        _run(engine, _ALLOW_RENEWAL[kind])

