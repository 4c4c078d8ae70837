"""The delivery queue on every database: claims, leases, backoff, dead letters, unknown review."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from sqlalchemy import text, update
from sqlalchemy.engine import Engine

from scheduler_core.access import Scope
from scheduler_core.db import close_engine, create_engine
from scheduler_core.db.tables import reach_queue
from scheduler_core.errors import ReachConfigError, ReachError
from scheduler_core.reach.queue import QueueOperations
from scheduler_core.store.reach_queue import QueueRepository, Settlement
from scheduler_core.store.reach_queue_pages import QueueFilter
from tests.conftest import TestDatabase
from tests.helpers.race import race
from tests.webapp.api_support import queued_row

POLICY = (3, 1_000, 4_000)


def _enqueue(repo: QueueRepository, not_before: int | None = None) -> str:
    queue_id = str(uuid.uuid4())
    repo.enqueue(queue_id, "hook", None, "ops@example.com", "Subject", "Body", {"k": 1}, POLICY, not_before)
    return queue_id


@pytest.fixture
def repo(engine: Engine) -> QueueRepository:
    return QueueRepository(engine, "node-a", 1_000)


def test_claim_counts_the_attempt_and_holds_a_lease(repo: QueueRepository) -> None:
    queue_id = _enqueue(repo)
    now = repo.now()
    message = repo.claim_next(now + 10, "tok-1")
    assert message is not None and message.entry.queue_id == queue_id
    assert (message.entry.status, message.entry.attempt_count, message.recipient) == ("processing", 1,
                                                                                      "ops@example.com")
    assert repo.claim_next(now + 10, "tok-2") is None  # nobody else gets it
    assert repo.mark_sending(queue_id, "tok-1") and not repo.mark_sending(queue_id, "tok-x")
    assert repo.renew(queue_id, "tok-1")
    assert repo.settle(queue_id, "tok-1", "sent", message_id="m-1")
    entry = repo.get(queue_id)
    assert entry is not None and (entry.status, entry.message_id, entry.locked_until) == ("sent", "m-1", None)


def test_fixed_eligibility_keeps_a_failed_row_out_of_the_same_round(repo: QueueRepository) -> None:
    queue_id = _enqueue(repo)
    eligible_at = repo.now()
    message = repo.claim_next(eligible_at, "tok")
    assert message is not None
    assert repo.settle(queue_id, "tok", "pending", last_failure="transient_failure", retry_in_ms=1_000)
    assert repo.claim_next(eligible_at, "tok-again") is None  # rescheduled past the round's time
    entry = repo.get(queue_id)
    assert entry is not None and entry.next_attempt_at > eligible_at and entry.last_failure == "transient_failure"


def test_a_wave_claims_the_oldest_due_rows_under_one_token(repo: QueueRepository) -> None:
    due_at = repo.now()
    oldest = [_enqueue(repo, not_before=due_at - 10 + i) for i in range(3)]
    _enqueue(repo, not_before=due_at - 1)
    _enqueue(repo, not_before=due_at + 60_000)  # not due in this round
    wave = repo.claim_due(due_at, "tok-w", 3)
    assert [m.entry.queue_id for m in wave] == oldest
    assert {(m.lock_token, m.entry.status, m.entry.attempt_count) for m in wave} == {("tok-w", "processing", 1)}
    for message in wave:  # the returned entry is exactly what the claim wrote
        assert repo.get(message.entry.queue_id) == message.entry
    assert len(repo.claim_due(due_at, "tok-v", 10)) == 1 and repo.claim_due(due_at, "tok-u", 10) == []


def test_concurrent_claimers_take_disjoint_rows_and_together_all(repo: QueueRepository, engine: Engine) -> None:
    """Four nodes claim waves of the same backlog at once: no row twice, none left behind (a
    claimer never comes back empty-handed while rows are due: SKIP LOCKED on the servers)."""
    due_at = repo.now()
    queued = {_enqueue(repo, not_before=due_at) for _ in range(40)}
    taken: list[str] = []
    guard = threading.Lock()

    def claim_until_empty() -> None:
        node = QueueRepository(engine, f"node-{threading.get_ident()}", 5_000)
        while wave := node.claim_due(due_at, str(uuid.uuid4()), 3):
            with guard:
                taken.extend(m.entry.queue_id for m in wave)

    assert race(claim_until_empty, Exception) == ["won"] * 4
    assert sorted(taken) == sorted(queued)


def test_a_claim_skips_rows_another_transaction_holds(server_database: TestDatabase) -> None:
    """The oldest due rows are locked by another claimer's open transaction: a claim takes the
    next due rows at once, neither waiting for the lock nor ending its round empty."""
    engine = create_engine(server_database.url)
    try:
        repo = QueueRepository(engine, "node-a", 1_000)
        due_at = repo.now()
        first = [_enqueue(repo, not_before=due_at - 5) for _ in range(3)]
        later = _enqueue(repo, not_before=due_at)
        with engine.connect() as locker:
            locker.begin()
            for queue_id in first:  # by primary key, one by one: a scan of this tiny table would lock every row
                locker.execute(text("SELECT queue_id FROM reach_queue WHERE queue_id = :q FOR UPDATE"), {"q": queue_id})
            wave = repo.claim_due(due_at, "tok", 10)
            locker.rollback()
        assert [m.entry.queue_id for m in wave] == [later]
        assert sorted(m.entry.queue_id for m in repo.claim_due(due_at, "tok-2", 10)) == sorted(first)
    finally:
        close_engine(engine)


def test_a_wave_settles_each_row_with_its_own_verdict(repo: QueueRepository, engine: Engine) -> None:
    """One settle writes different outcomes per row, and skips a row whose lease was lost."""
    ids = [_enqueue(repo) for _ in range(4)]
    wave = repo.claim_due(repo.now(), "tok", 4)
    assert repo.mark_sending_many(ids, "tok") == set(ids)
    with engine.begin() as conn:  # the last row's lease was taken over meanwhile
        conn.execute(update(reach_queue).where(reach_queue.c.queue_id == ids[3]).values(lock_token="other"))
    applied = repo.settle_many("tok", [
        Settlement(ids[0], "sent", message_id="m-0"), Settlement(ids[1], "pending", None, "transient_failure", 5_000),
        Settlement(ids[2], "dead", None, "permanent_rejection"), Settlement(ids[3], "sent", message_id="m-3")])
    assert applied == set(ids[:3]) and len(wave) == 4
    entries = [repo.get(queue_id) for queue_id in ids]
    assert [(e.status, e.message_id, e.last_failure, e.locked_until) for e in entries if e] == [
        ("sent", "m-0", None, None), ("pending", None, "transient_failure", None),
        ("dead", None, "permanent_rejection", None), ("sending", None, None, entries[3].locked_until if entries[3]
                                                      else None)]
    assert entries[1] is not None and entries[1].next_attempt_at >= entries[1].updated_at + 4_000


def test_a_delayed_message_waits_for_its_time(repo: QueueRepository) -> None:
    _enqueue(repo, not_before=repo.now() + 60_000)
    assert repo.claim_next(repo.now(), "tok") is None


def test_expired_claims_are_found_and_settled_once(repo: QueueRepository) -> None:
    queue_id = _enqueue(repo)
    message = repo.claim_next(repo.now(), "tok")
    assert message is not None and repo.mark_sending(queue_id, "tok")
    time.sleep(1.1)  # the 1 s lease runs out
    expired = repo.expired()
    assert [m.entry.queue_id for m in expired] == [queue_id] and expired[0].entry.status == "sending"
    assert not repo.settle(queue_id, "tok", "sent")  # the stale owner is refused
    assert repo.recover(expired[0], "unknown", "transient_failure")
    assert not repo.recover(expired[0], "unknown", "transient_failure")
    entry = repo.get(queue_id)
    assert entry is not None and entry.status == "unknown"


def _dead(repo: QueueRepository, engine: Engine) -> str:
    queue_id = _enqueue(repo)
    with engine.begin() as conn:
        conn.execute(update(reach_queue).where(reach_queue.c.queue_id == queue_id).values(
            status="dead", attempt_count=3, last_failure="attempts_exhausted"))
    return queue_id


def test_requeue_dead_is_a_compare_and_set(repo: QueueRepository, engine: Engine) -> None:
    ops = QueueOperations(lambda: repo)
    queue_id = _dead(repo, engine)
    entry = ops.get(queue_id)
    assert entry is not None and [e.queue_id for e in ops.list("dead")] == [queue_id]
    with pytest.raises(ReachError, match="changed"):
        ops.requeue_dead(queue_id, entry.updated_at - 1)
    assert ops.counts()["dead"] == 1
    requeued = ops.requeue_dead(queue_id, entry.updated_at)
    assert (ops.counts()["dead"], ops.counts()["pending"], ops.counts()["sent"]) == (0, 1, 0)
    assert (requeued.status, requeued.attempt_count, requeued.queue_id, requeued.max_attempts) == (
        "pending", 0, queue_id, 3)
    with pytest.raises(ReachError, match="only dead"):
        ops.requeue_dead(queue_id, requeued.updated_at)


def test_unknown_is_resolved_once_and_never_requeued(repo: QueueRepository, engine: Engine) -> None:
    ops = QueueOperations(lambda: repo)
    queue_id = _enqueue(repo)
    with engine.begin() as conn:
        conn.execute(update(reach_queue).where(reach_queue.c.queue_id == queue_id).values(status="unknown"))
    entry = ops.get(queue_id)
    assert entry is not None
    with pytest.raises(ReachError, match="only dead"):
        ops.requeue_dead(queue_id, entry.updated_at)
    outcomes = race(lambda: ops.resolve_unknown(queue_id, "sent", message_id="checked-123", resolved_by="alice"),
                    ReachError)
    assert outcomes == ["lost", "lost", "lost", "won"]
    final = ops.get(queue_id)
    assert final is not None and (final.status, final.message_id) == ("sent", "checked-123")


def test_operator_input_is_validated(repo: QueueRepository) -> None:
    ops = QueueOperations(lambda: repo)
    for call, field in [
        (lambda: ops.get("not-a-uuid"), "queue_id"),
        (lambda: ops.list("sent"), "status"),
        (lambda: ops.list("dead", limit=101), "limit"),
        (lambda: ops.list("dead", offset=-1), "offset"),
        (lambda: ops.resolve_unknown(str(uuid.uuid4()), "retry"), "status"),
        (lambda: ops.requeue_dead(str(uuid.uuid4()), "now"), "expected_updated_at"),  # type: ignore[arg-type]
    ]:
        with pytest.raises(ReachConfigError) as info:
            call()
        assert info.value.field == field
    assert ops.get(str(uuid.uuid4())) is None


def _dead_at(repo: QueueRepository, engine: Engine, updated_at: int, failure: str = "attempts_exhausted") -> str:
    queue_id = _enqueue(repo)
    with engine.begin() as conn:
        conn.execute(update(reach_queue).where(reach_queue.c.queue_id == queue_id).values(
            status="dead", attempt_count=3, last_failure=failure, updated_at=updated_at))
    return queue_id


def test_recovery_refuses_a_claim_whose_lease_still_runs(repo: QueueRepository) -> None:
    queue_id = _enqueue(repo)
    message = repo.claim_next(repo.now(), "tok")
    assert message is not None
    assert not repo.recover(message, "unknown", "transient_failure")  # its owner is alive
    entry = repo.get(queue_id)
    assert entry is not None and entry.status == "processing"


def test_capped_counts_stop_one_past_the_cap(repo: QueueRepository) -> None:
    for _ in range(4):
        _enqueue(repo)
    assert repo.count_by_status_capped(("pending", "dead"), 1) == {"pending": 2, "dead": 0}
    assert repo.count_by_status_capped(("pending",), 4) == {"pending": 4}
    assert QueueOperations(lambda: repo).counts(cap=1)["pending"] == 2  # the smallest cap there is


def test_a_bulk_set_knows_whether_more_matched_than_it_takes(repo: QueueRepository, engine: Engine) -> None:
    for i in range(3):
        _dead_at(repo, engine, 1_000 + i)
    exact = repo.capture_dead(QueueFilter("dead"), repo.now(), 3)
    assert (exact.count, exact.more) == (3, False)
    fewer = repo.capture_dead(QueueFilter("dead"), repo.now(), 2)
    assert (fewer.count, fewer.more) == (2, True)


def test_a_bulk_requeue_takes_exactly_the_versions_it_names(repo: QueueRepository, engine: Engine) -> None:
    same_version = sorted(_dead_at(repo, engine, 5_000) for _ in range(3))
    middle = same_version[1]  # a smaller and a larger id share its version
    assert repo.requeue_dead_versions([]) == 0
    assert repo.requeue_dead_versions([(middle, 5_000)]) == 1
    statuses = {queue_id: entry.status for queue_id in same_version if (entry := repo.get(queue_id))}
    assert statuses == {queue_id: "pending" if queue_id == middle else "dead" for queue_id in same_version}


def test_a_failure_filter_matches_that_class_only(repo: QueueRepository, engine: Engine) -> None:
    by_class = {failure: _dead_at(repo, engine, 1_000 + i, failure) for i, failure in
                enumerate(("attempts_exhausted", "permanent_rejection", "transient_failure"))}
    for failure, queue_id in by_class.items():
        page = repo.browse(QueueFilter("dead", failure=failure), 10, None)
        assert [entry.queue_id for entry in page] == [queue_id], failure


def test_a_settle_that_waited_on_a_row_lock_past_its_lease_is_refused(server_database: TestDatabase) -> None:
    """The owner's final word is decided by the database clock after the row lock is held: a
    settle queued behind another transaction while its lease ran out changes nothing."""
    engine = create_engine(server_database.url)
    try:
        repo = QueueRepository(engine, "owner", 1_000)
        queue_id = _enqueue(repo)
        assert repo.claim_next(repo.now(), "tok") is not None
        outcome: list[bool] = []
        with engine.connect() as locker:
            locker.begin()
            locker.execute(text("SELECT queue_id FROM reach_queue WHERE queue_id = :q FOR UPDATE"), {"q": queue_id})
            settler = threading.Thread(target=lambda: outcome.append(repo.settle(queue_id, "tok", "sent")))
            settler.start()
            time.sleep(1.6)  # the lease (1 s) runs out while the settle waits for the row lock
            locker.commit()
        settler.join(20)
        assert outcome == [False]
        entry = repo.get(queue_id)
        assert entry is not None and entry.status == "processing"
    finally:
        close_engine(engine)


def test_a_teams_counts_are_exact_without_a_cap_and_bounded_with_one(repo: QueueRepository, engine: Engine) -> None:
    for team in ("ops", "ops", "ops", "default", None):
        queued_row(engine, "dead", team=team)
    ops = QueueOperations(lambda: repo)
    scope = Scope(frozenset({"ops"}))
    assert ops.counts(scope=scope)["dead"] == 3  # every one of the team's, no hidden cap
    assert ops.counts(cap=1, scope=scope)["dead"] == 2  # "more than 1"
    assert ops.counts(scope=Scope(frozenset({"ops", "default"})))["dead"] == 4
    assert ops.counts(scope=Scope(frozenset()))["dead"] == 0  # no team: nothing, and no error
    assert ops.counts()["dead"] == 5
