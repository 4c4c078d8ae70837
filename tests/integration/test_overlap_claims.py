"""A task's overlap policy at the claim, on every database (docs/semantics.md S9): a cron occurrence
whose slot is held waits (``queued``, ``buffered``) while fewer than the policy's limit wait, and
is ``skipped`` (``buffer_full``) beyond; while some wait, a new one waits behind them even with
the slot free; the scan of queued rows seats the earliest, and the rest wait on. Two claims of one
task at the same instant never both take the last place."""

from __future__ import annotations

import threading
import uuid

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Engine

from scheduler_core.db.tables import executions, slots
from scheduler_core.runtime.recovery import queued_request
from scheduler_core.store import ClaimOutcome, ClaimRequest, ExecutionRepository
from scheduler_core.store.handoff import HandoffRepository

MINUTE = 60_000
T0 = 1_800_000_000_000 - 1_800_000_000_000 % MINUTE


def _request(task_id: str, minute: int, limit: int) -> ClaimRequest:
    return ClaimRequest(f"{task_id}@{minute}", task_id, 1, "cron", 1, str(uuid.uuid4()),
                        scheduled_minute=T0 + minute * MINUTE, waiting_limit=limit)


def _claim(engine: Engine, task_id: str, minute: int, limit: int) -> str:
    (result,) = ExecutionRepository(engine, "claimer", 60_000).claim([_request(task_id, minute, limit)])
    return result.outcome


def _rows(engine: Engine, task_id: str) -> dict[int, tuple[str, str | None]]:
    """The task's journal: (status, reason) by minute number."""
    with engine.connect() as conn:
        found = conn.execute(select(executions.c.scheduled_minute, executions.c.status, executions.c.reason)
                             .where(executions.c.task_id == task_id)).all()
        conn.rollback()
    return {(int(m) - T0) // MINUTE: (s, r) for m, s, r in found}


def _held_by(engine: Engine, task_id: str, holder: str | None) -> None:
    with engine.begin() as conn:
        if conn.execute(select(slots.c.task_id).where(slots.c.task_id == task_id)).first() is None:
            conn.execute(insert(slots).values(task_id=task_id, occurrence_id=holder, execution_token=None,
                                              updated_at=0))
        else:
            conn.execute(update(slots).where(slots.c.task_id == task_id).values(occurrence_id=holder))


def test_buffer_one_lets_one_wait_and_skips_the_next_as_buffer_full(engine: Engine) -> None:
    assert _claim(engine, "one", 0, 1) == ClaimOutcome.CLAIMED
    assert _claim(engine, "one", 1, 1) == ClaimOutcome.WAITING
    assert _claim(engine, "one", 2, 1) == ClaimOutcome.SKIPPED
    assert _rows(engine, "one") == {0: ("running", None), 1: ("queued", "buffered"), 2: ("skipped", "buffer_full")}


def test_skip_is_still_slot_busy(engine: Engine) -> None:
    assert _claim(engine, "plain", 0, 0) == ClaimOutcome.CLAIMED
    assert _claim(engine, "plain", 1, 0) == ClaimOutcome.SKIPPED
    assert _rows(engine, "plain")[1] == ("skipped", "slot_busy")


def test_buffer_all_waits_in_minute_order_up_to_its_limit(engine: Engine) -> None:
    assert _claim(engine, "all", 0, 3) == ClaimOutcome.CLAIMED
    assert [_claim(engine, "all", m, 3) for m in (1, 2, 3, 4)] == ["waiting", "waiting", "waiting", "skipped"]
    _held_by(engine, "all", None)  # the running one ended; nobody has seated the waiting ones yet
    assert _claim(engine, "all", 5, 3) == ClaimOutcome.SKIPPED  # three wait: full, though the slot is free
    handoff = HandoffRepository(ExecutionRepository(engine, "scanner", 60_000))
    queued = [e for e in handoff.queued(100) if e.task_id == "all"]
    assert [(e.scheduled_minute - T0) // MINUTE for e in queued] == [1, 2, 3]
    results = handoff.claim_queued([queued_request(e, str(uuid.uuid4())) for e in queued])
    assert {r.occurrence_id: r.outcome for r in results} == {
        "all@1": "claimed", "all@2": "waiting", "all@3": "waiting"}
    assert _rows(engine, "all") == {0: ("running", None), 1: ("running", None), 2: ("queued", "buffered"),
                                    3: ("queued", "buffered"), 4: ("skipped", "buffer_full"),
                                    5: ("skipped", "buffer_full")}


def test_a_new_occurrence_waits_behind_the_waiting_ones_even_with_the_slot_free(engine: Engine) -> None:
    assert _claim(engine, "fifo", 0, 5) == ClaimOutcome.CLAIMED
    assert _claim(engine, "fifo", 1, 5) == ClaimOutcome.WAITING
    _held_by(engine, "fifo", None)
    assert _claim(engine, "fifo", 2, 5) == ClaimOutcome.WAITING  # not ahead of minute 1
    with engine.connect() as conn:
        assert conn.execute(select(slots.c.occurrence_id).where(slots.c.task_id == "fifo")).scalar_one() is None
        conn.rollback()


def test_two_claims_at_once_never_both_take_the_last_place(engine: Engine) -> None:
    """Two nodes claiming two minutes of one buffer_one task at the same instant (a node running
    a minute late): exactly one waits, the other is buffer_full -- the count is read under the
    task's lock. SQLite serialises writers; the servers are where this races."""
    for round_ in range(6):
        task_id = f"race{round_}"
        assert _claim(engine, task_id, 0, 1) == ClaimOutcome.CLAIMED
        barrier = threading.Barrier(2)
        outcomes: list[str] = []

        def claim(minute: int, task_id: str = task_id, barrier: threading.Barrier = barrier,
                  outcomes: list[str] = outcomes) -> None:
            repo = ExecutionRepository(engine, f"node{minute}", 60_000)
            request = _request(task_id, minute, 1)
            barrier.wait()
            outcomes.extend(r.outcome for r in repo.claim([request]))

        threads = [threading.Thread(target=claim, args=(m,)) for m in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(outcomes) == ["skipped", "waiting"], (round_, outcomes)
        statuses = sorted(_rows(engine, task_id).values(), key=str)
        assert statuses == sorted([("running", None), ("queued", "buffered"), ("skipped", "buffer_full")], key=str)
