"""Batched owner writes on every database: each row of a batch is decided on its own.

A batch of begins or terminal commits is one lock statement and one UPDATE; the answer is
per row (RETURNING on PostgreSQL and SQLite, the matched count and a re-read on MySQL). These
tests build batches in which some rows are no longer ours -- lease expired, taken over by
another node -- and check that exactly the others were written, that a row the database
refuses fails alone, that a failing log projection leaves the terminal commit in place
(``pending``), that a write which waited on a row lock is decided by the clock after the
wait, and that an idle tick is one statement and one round trip.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import event, insert, select, text, update
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.cron import new_occurrence_id
from scheduler_core.db import close_engine, create_engine
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import executions, logs, scheduler_meta
from scheduler_core.errors import DatabaseError
from scheduler_core.model import Attempt, Execution
from scheduler_core.runtime.batching import Answer, FinishOutcome, GroupCommit, OwnerWrites
from scheduler_core.store import ClaimRequest, ExecutionRepository, LogRepository
from scheduler_core.store.executions import BeginRequest, FinishRequest
from scheduler_core.store.transactions import AutocommitLine
from tests.conftest import TestDatabase
from tests.helpers.journal import slot_holder, wait_for_first_tick

LEASE_MS = 60_000


@pytest.fixture
def owner(engine: Engine) -> ExecutionRepository:
    return ExecutionRepository(engine, "owner", LEASE_MS)


def _claim(repo: ExecutionRepository, count: int, prefix: str = "job") -> list[tuple[str, str]]:
    """Claim ``count`` manual occurrences of tasks ``<prefix>-<i>``; (occurrence id, token) each."""
    claimed = [(new_occurrence_id(), str(uuid.uuid4())) for _ in range(count)]
    results = repo.claim([ClaimRequest(o, f"{prefix}-{i}", 1, "manual", 3, t) for i, (o, t) in enumerate(claimed)])
    assert {r.outcome for r in results} == {"claimed"}
    return claimed


def _attempt(node: str = "owner", status: str | None = None, result: Any = None) -> Attempt:
    return Attempt(log_id=str(uuid.uuid4()), attempt=1, sequence=1, node_id=node, started_at=1_000,
                   finished_at=None if status is None else 2_000, status=status, result=result)


def _expire(engine: Engine, occurrence_id: str) -> None:
    """The lease runs out (as if the owner had stalled)."""
    with engine.begin() as conn:
        conn.execute(update(executions).where(executions.c.occurrence_id == occurrence_id).values(lease_until=0))


def _row(engine: Engine, occurrence_id: str) -> Any:
    with engine.connect() as conn:
        row = conn.execute(select(executions).where(executions.c.occurrence_id == occurrence_id)).one()
        conn.rollback()
    return row


def _log_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        found = set(conn.execute(select(logs.c.id)).scalars())
        conn.rollback()
    return found


def _take_over(engine: Engine, occurrence_id: str) -> str:
    """Another node takes the (expired) execution over; returns its new token."""
    _expire(engine, occurrence_id)
    thief = ExecutionRepository(engine, "thief", LEASE_MS)
    expired = thief.get(occurrence_id)
    assert expired is not None
    token = str(uuid.uuid4())
    assert thief.take_over(expired, token)
    return token


def _execution(repo: ExecutionRepository, occurrence_id: str) -> Execution:
    found = repo.get(occurrence_id)
    assert found is not None
    return found


# --- begins -----------------------------------------------------------------------------


def test_a_begin_batch_writes_only_the_rows_still_owned(engine: Engine, owner: ExecutionRepository) -> None:
    (expired, t1), (taken, t2), (ours, t3), (also_ours, t4) = _claim(owner, 4)
    _expire(engine, expired)
    thief_token = _take_over(engine, taken)
    attempts = {o: (_attempt(),) for o in (expired, taken, ours, also_ours)}
    requests = [BeginRequest(o, t, attempts[o]) for o, t in ((expired, t1), (taken, t2), (ours, t3), (also_ours, t4))]

    assert owner.begin_attempts(requests) == {ours, also_ours}

    for occurrence in (ours, also_ours):
        row = _row(engine, occurrence)
        assert row.attempt == 1 and [a["log_id"] for a in row.attempts] == [attempts[occurrence][0].log_id]
        assert row.lease_until > 0
    assert (_row(engine, expired).attempt, _row(engine, expired).lease_until) == (0, 0)
    stolen = _row(engine, taken)
    assert (stolen.execution_token, stolen.sequence, stolen.attempt, stolen.attempts) == (thief_token, 2, 0, [])


def test_a_begin_batch_where_every_row_is_still_owned(engine: Engine, owner: ExecutionRepository) -> None:
    claimed = _claim(owner, 3)
    assert owner.begin_attempts([BeginRequest(o, t, (_attempt(),)) for o, t in claimed]) == {o for o, _ in claimed}
    assert owner.begin_attempts([]) == set()
    assert all(_row(engine, o).attempt == 1 for o, _ in claimed)


# --- terminal commits ---------------------------------------------------------------------


def _begun(owner: ExecutionRepository, count: int) -> list[tuple[Execution, str, Attempt]]:
    claimed = _claim(owner, count)
    begun = {o: _attempt() for o, _ in claimed}
    assert owner.begin_attempts([BeginRequest(o, t, (begun[o],)) for o, t in claimed]) == set(begun)
    return [(_execution(owner, o), t, begun[o]) for o, t in claimed]


def _finished(attempt: Attempt, status: str, result: Any = None) -> tuple[Attempt, ...]:
    return (replace(attempt, status=status, finished_at=2_000, result=result),)


def test_a_finish_batch_commits_and_projects_only_the_rows_still_owned(engine: Engine,
                                                                      owner: ExecutionRepository) -> None:
    rows = _begun(owner, 5)
    (expired, t1, a1), (taken, t2, a2), (good, t3, a3), (bad, t4, a4), (unsure, t5, a5) = rows
    _expire(engine, expired.occurrence_id)
    _take_over(engine, taken.occurrence_id)
    requests = [
        FinishRequest(expired, t1, "success", None, _finished(a1, "success"), True),
        FinishRequest(taken, t2, "success", None, _finished(a2, "success"), True),
        FinishRequest(good, t3, "success", None, _finished(a3, "success", {"n": 1}), True),
        FinishRequest(bad, t4, "failed", None, _finished(a4, "failed"), True),
        FinishRequest(unsure, t5, "unknown", "outcome_unknown", _finished(a5, "unknown"), False),
    ]

    result = owner.finish_many(requests)

    won = {good.occurrence_id, bad.occurrence_id, unsure.occurrence_id}
    assert result.committed == won and result.persisted == won and result.projection_error is None
    assert [(_row(engine, e.occurrence_id).status, _row(engine, e.occurrence_id).reason)
            for e in (good, bad, unsure)] == [("success", None), ("failed", None), ("unknown", "outcome_unknown")]
    assert all(_row(engine, e.occurrence_id).log_persistence == "persisted" for e in (good, bad, unsure))
    assert _log_ids(engine) == {a3.log_id, a4.log_id, a5.log_id}
    assert slot_holder(engine, good.task_id) is None and slot_holder(engine, bad.task_id) is None
    assert slot_holder(engine, unsure.task_id) == unsure.occurrence_id  # unknown keeps the slot
    for lost in (expired, taken):
        row = _row(engine, lost.occurrence_id)
        assert row.status == "running" and row.log_persistence is None
        assert slot_holder(engine, lost.task_id) == lost.occurrence_id


# Task ids may hold any text but control characters; a batch carries them as parameters
# (PostgreSQL: an array literal of the ids, a JSON document of the rows), never as SQL.
AWKWARD_TASK_IDS = ['a,b', '{braced}', 'q"uote', "it's", 'back\\slash\\', 'NULL', ' spaced ', 'ünï ☃ 𝄞',
                    '\\"{,}"\\', '[1, 2]', 'null']


def test_a_batch_carries_awkward_ids_and_values_as_they_are(engine: Engine, owner: ExecutionRepository) -> None:
    claimed = [(new_occurrence_id(), f'tok"{i},{{}}\\') for i in range(len(AWKWARD_TASK_IDS))]
    results = owner.claim([ClaimRequest(o, AWKWARD_TASK_IDS[i], 1, "manual", 3, t) for i, (o, t) in enumerate(claimed)])
    assert [r.outcome for r in results] == ["claimed"] * len(claimed)
    begun = {o: _attempt() for o, _ in claimed}
    assert owner.begin_attempts([BeginRequest(o, t, (begun[o],)) for o, t in claimed]) == set(begun)
    weird = {"text": 'x"y\\z,{}', "list": [None, "NULL", 1.5], "nested": {"a": [{"b": None}]}}
    requests = [FinishRequest(_execution(owner, o), t, "failed", "why, \"so\"", _finished(begun[o], "failed", weird),
                              True) for o, t in claimed]

    result = owner.finish_many(requests)

    assert result.committed == set(begun) and result.persisted == set(begun)
    for i, (occurrence, token) in enumerate(claimed):
        row = _row(engine, occurrence)
        assert (row.task_id, row.execution_token, row.status, row.reason) == (
            AWKWARD_TASK_IDS[i], token, "failed", 'why, "so"')
        assert row.attempts[0]["result"] == weird
        assert slot_holder(engine, AWKWARD_TASK_IDS[i]) is None
    with engine.connect() as conn:
        projected = {r.id: (r.task_id, r.result) for r in conn.execute(select(logs))}
        conn.rollback()
    assert projected == {begun[o].log_id: (AWKWARD_TASK_IDS[i], weird) for i, (o, _) in enumerate(claimed)}


def test_a_failed_projection_leaves_the_terminal_commits_pending(engine: Engine, owner: ExecutionRepository) -> None:
    (first, t1, a1), (second, t2, a2) = _begun(owner, 2)
    with engine.begin() as conn:  # a log row under the first attempt's id that disagrees with the journal
        conn.execute(insert(logs).values(id=a1.log_id, occurrence_id=first.occurrence_id, task_id=first.task_id,
                                         trigger="manual", status="failed", sequence=1, attempt=1, node_id="owner",
                                         started_at=1_000, created_at=1))
    requests = [FinishRequest(first, t1, "success", None, _finished(a1, "success"), True),
                FinishRequest(second, t2, "success", None, _finished(a2, "success"), True)]

    result = owner.finish_many(requests)

    assert result.committed == {first.occurrence_id, second.occurrence_id} and result.persisted == frozenset()
    assert result.projection_error is not None and "differs from the journal" in result.projection_error
    assert [_row(engine, e.occurrence_id).status for e in (first, second)] == ["success", "success"]
    assert [_row(engine, e.occurrence_id).log_persistence for e in (first, second)] == ["pending", "pending"]
    assert _log_ids(engine) == {a1.log_id}  # the batch's projection was rolled back whole


def test_the_node_projects_each_row_alone_after_a_batch_projection_failed(engine: Engine,
                                                                          owner: ExecutionRepository) -> None:
    (first, t1, a1), (second, t2, a2) = _begun(owner, 2)
    with engine.begin() as conn:
        conn.execute(insert(logs).values(id=a1.log_id, occurrence_id=first.occurrence_id, task_id=first.task_id,
                                         trigger="manual", status="failed", sequence=1, attempt=1, node_id="owner",
                                         started_at=1_000, created_at=1))
    writes = OwnerWrites(owner, LogRepository(engine))
    try:
        outcomes = writes.write_finishes([FinishRequest(first, t1, "success", None, _finished(a1, "success"), True),
                                          FinishRequest(second, t2, "success", None, _finished(a2, "success"), True)])
    finally:
        writes.drain()
    assert all(isinstance(o, FinishOutcome) and o.committed for o in outcomes)
    assert [o.persistence.status for o in outcomes if isinstance(o, FinishOutcome)] == ["pending", "persisted"]
    assert [_row(engine, e.occurrence_id).log_persistence for e in (first, second)] == ["pending", "persisted"]
    assert _log_ids(engine) == {a1.log_id, a2.log_id}


def test_a_row_the_database_cannot_take_fails_alone(engine: Engine, owner: ExecutionRepository) -> None:
    (first, t1, a1), (second, t2, a2), (third, t3, a3) = _begun(owner, 3)
    unstorable = object()  # not JSON: no database can store this attempt
    writes = OwnerWrites(owner, LogRepository(engine))
    try:
        outcomes = writes.write_finishes([
            FinishRequest(first, t1, "success", None, _finished(a1, "success"), True),
            FinishRequest(second, t2, "success", None, _finished(a2, "success", unstorable), True),
            FinishRequest(third, t3, "failed", None, _finished(a3, "failed"), True)])
    finally:
        writes.drain()
    assert isinstance(outcomes[0], FinishOutcome) and outcomes[0].committed
    assert isinstance(outcomes[1], Exception)
    assert isinstance(outcomes[2], FinishOutcome) and outcomes[2].committed
    assert [_row(engine, e.occurrence_id).status for e in (first, second, third)] == ["success", "running", "failed"]


def test_begins_through_the_node_writes_decide_each_row(engine: Engine, owner: ExecutionRepository) -> None:
    (expired, t1), (ours, t2) = _claim(owner, 2)
    _expire(engine, expired)
    writes = OwnerWrites(owner, LogRepository(engine))
    try:
        answers = writes.write_begins([BeginRequest(expired, t1, (_attempt(),)), BeginRequest(ours, t2, (_attempt(),))])
        submitted = writes.begins.submit(BeginRequest(ours, t2, (_attempt(), _attempt()))).result(10)
    finally:
        writes.drain()
    assert answers == [False, True] and submitted is True
    assert _row(engine, ours).attempt == 2


# --- claims ------------------------------------------------------------------------------------


def test_a_claim_batch_answers_per_row(engine: Engine, owner: ExecutionRepository) -> None:
    other = ExecutionRepository(engine, "other", LEASE_MS)
    (theirs, _), = _claim(other, 1, prefix="a")
    (busy_holder, _), = _claim(other, 1, prefix="b")  # holds task b-0's slot
    mine, busy = new_occurrence_id(), new_occurrence_id()
    results = owner.claim([ClaimRequest(theirs, "a-0", 1, "manual", 1, str(uuid.uuid4())),
                           ClaimRequest(busy, "b-0", 1, "manual", 1, str(uuid.uuid4())),
                           ClaimRequest(mine, "c-0", 1, "manual", 1, str(uuid.uuid4()))])
    assert {r.occurrence_id: r.outcome for r in results} == {theirs: "exists", busy: "skipped", mine: "claimed"}
    assert (_row(engine, busy).status, _row(engine, busy).reason) == ("skipped", "slot_busy")
    assert slot_holder(engine, "b-0") == busy_holder and slot_holder(engine, "c-0") == mine
    assert _row(engine, theirs).owner_node == "other"


def test_a_retried_claim_recognises_its_own_row_whose_answer_was_lost(engine: Engine,
                                                                      owner: ExecutionRepository) -> None:
    """The claim's COMMIT was applied but its answer lost: the retry (same tokens, ``retry``)
    gets its rows back as claimed while untouched; anything else stays someone else's."""
    token = str(uuid.uuid4())
    lost, began, busy, busy_holder = (new_occurrence_id() for _ in range(4))
    began_token = str(uuid.uuid4())
    first = owner.claim([ClaimRequest(lost, "lost", 1, "manual", 1, token),
                         ClaimRequest(began, "began", 1, "manual", 1, began_token)])
    assert {r.outcome for r in first} == {"claimed"}  # ... as if that answer had never arrived
    assert owner.begin_attempts([BeginRequest(began, began_token, (_attempt(),))]) == {began}
    other = ExecutionRepository(engine, "other", LEASE_MS)
    assert [r.outcome for r in other.claim([ClaimRequest(busy_holder, "busy", 1, "manual", 1, "held")])] == [
        "claimed"]
    busy_token = str(uuid.uuid4())
    assert [r.outcome for r in owner.claim([ClaimRequest(busy, "busy", 1, "manual", 1, busy_token)])] == ["skipped"]

    retried = owner.claim([ClaimRequest(lost, "lost", 1, "manual", 1, token, retry=True),
                           ClaimRequest(began, "began", 1, "manual", 1, began_token, retry=True),
                           ClaimRequest(busy, "busy", 1, "manual", 1, busy_token, retry=True)])
    assert {r.occurrence_id: r.outcome for r in retried} == {lost: "claimed", began: "exists", busy: "skipped"}
    # Not a retry, or another token: the row is not ours.
    again = owner.claim([ClaimRequest(lost, "lost", 1, "manual", 1, token)])
    stranger = other.claim([ClaimRequest(lost, "lost", 1, "manual", 1, str(uuid.uuid4()), retry=True)])
    assert [r.outcome for r in again + stranger] == ["exists", "exists"]
    row = _row(engine, lost)
    assert (row.status, row.execution_token, row.owner_node, row.sequence) == ("running", token, "owner", 1)
    assert slot_holder(engine, "lost") == lost


def test_a_claim_seats_an_occurrence_whose_task_has_no_slot_row(engine: Engine, owner: ExecutionRepository) -> None:
    """A slot row is made with its task; a claim covers one missing for any reason (these
    task ids were never registered: no slot rows until the first claim makes them)."""
    holder = ExecutionRepository(engine, "other", LEASE_MS)
    (held_first, _), = _claim(holder, 1, prefix="held")  # task held-0's slot row exists, held
    bare, held = new_occurrence_id(), new_occurrence_id()
    results = owner.claim([ClaimRequest(bare, "bare", 1, "manual", 1, str(uuid.uuid4())),
                           ClaimRequest(held, "held-0", 1, "manual", 1, str(uuid.uuid4()))])
    assert {r.occurrence_id: r.outcome for r in results} == {bare: "claimed", held: "skipped"}
    assert (slot_holder(engine, "bare"), slot_holder(engine, "held-0")) == (bare, held_first)


# --- the lock-wait pitfall, batched ---------------------------------------------------------


def test_a_batched_finish_that_waited_on_a_lock_past_one_rows_deadline(server_database: TestDatabase) -> None:
    """One row's lease runs out while the batch waits for its row lock: that row is refused
    after the wait (the DB clock read after the lock), the other is committed."""
    engine = create_engine(server_database.url)
    try:
        short = ExecutionRepository(engine, "owner", 1000)
        long = ExecutionRepository(engine, "owner", LEASE_MS)
        (brief, t1), = _claim(short, 1, prefix="short")
        (lasting, t2), = _claim(long, 1, prefix="long")
        a1, a2 = _attempt(), _attempt()
        assert short.begin_attempts([BeginRequest(brief, t1, (a1,))]) == {brief}
        assert long.begin_attempts([BeginRequest(lasting, t2, (a2,))]) == {lasting}
        requests = [FinishRequest(_execution(long, brief), t1, "success", None, _finished(a1, "success"), True),
                    FinishRequest(_execution(long, lasting), t2, "success", None, _finished(a2, "success"), True)]
        outcome: list[Any] = []
        with engine.connect() as locker:
            locker.begin()
            locker.execute(text("SELECT occurrence_id FROM executions WHERE occurrence_id = :o FOR UPDATE"),
                           {"o": brief})
            finisher = threading.Thread(target=lambda: outcome.append(long.finish_many(requests)))
            finisher.start()
            time.sleep(1.6)  # the short lease (1 s) runs out while the batch waits for the row lock
            locker.commit()
        finisher.join(20)
        assert outcome and outcome[0].committed == {lasting}
        assert _row(engine, brief).status == "running" and _row(engine, lasting).status == "success"
    finally:
        close_engine(engine)


# --- the group commit itself -----------------------------------------------------------------


def test_group_commit_gathers_what_queues_during_a_flush() -> None:
    entered, release = threading.Event(), threading.Event()
    batches: list[list[int]] = []

    def flush(batch: list[int]) -> list[int | Exception]:
        batches.append(batch)
        if len(batches) == 1:
            entered.set()
            release.wait(10)
        return [ValueError(f"odd {n}") if n % 2 else n * 10 for n in batch]

    group: GroupCommit[int, int] = GroupCommit("test", flush)
    first = group.submit(0)
    assert entered.wait(10)
    later = [group.submit(n) for n in range(1, 6)]  # queued while the first flush runs
    release.set()
    assert first.result(10) == 0
    assert [f.result(10) for f in later[1::2]] == [20, 40]
    for future in later[0::2]:
        with pytest.raises(ValueError, match="odd"):
            future.result(10)
    group.drain()
    assert batches == [[0], [1, 2, 3, 4, 5]]


def test_group_commit_takes_what_is_submitted_together_in_one_batch() -> None:
    """A claim's begins are queued at once (``submit_many``, ``RunPool.submit_all``): the waiting
    flusher takes them in one batch -- not the first alone, as it woke, and the rest after that
    commit (each begin batch is a commit the starts wait for)."""
    batches: list[int] = []

    def flush(batch: list[int]) -> list[int | Exception]:
        batches.append(len(batch))
        return [n * 10 for n in batch]

    group: GroupCommit[int, int] = GroupCommit("test", flush)
    for _ in range(20):
        answers = group.submit_many(list(range(40)))
        assert [a.result(10) for a in answers] == [n * 10 for n in range(40)]
    assert group.submit_many([]) == []
    group.drain()
    assert batches == [40] * 20


def test_group_commit_reports_a_failing_flush_to_every_waiter() -> None:
    def flush(batch: list[int]) -> list[int | Exception]:
        raise RuntimeError("flush broke")

    group: GroupCommit[int, int] = GroupCommit("test", flush)
    futures = [group.submit(n) for n in range(3)]
    for future in futures:
        with pytest.raises(RuntimeError, match="flush broke"):
            future.result(10)
    group.drain()


def test_an_answer_waits_once_answers_every_waiter_and_calls_back_in_any_order() -> None:
    answer: Answer[int] = Answer()
    with pytest.raises(TimeoutError):
        answer.result(0.05)
    early: list[int] = []
    answer.add_done_callback(lambda a: early.append(a.result()))
    answer.add_done_callback(lambda a: 1 / 0)  # a failing callback is logged; the others still run
    answer.add_done_callback(lambda a: early.append(a.result() + 1))
    waiters = [threading.Thread(target=lambda: early.append(answer.result(10))) for _ in range(3)]
    for waiter in waiters:
        waiter.start()
    answer.set_result(7)
    for waiter in waiters:
        waiter.join(10)
    assert sorted(early) == [7, 7, 7, 7, 8]
    late: list[int] = []
    answer.add_done_callback(lambda a: late.append(a.result()))  # after the answer: called at once
    assert late == [7] and answer.done() and answer.result() == 7
    with pytest.raises(RuntimeError, match="once"):
        answer.set_result(8)
    failed: Answer[int] = Answer()
    failed.set_exception(ValueError("refused"))
    for _ in range(2):
        with pytest.raises(ValueError, match="refused"):
            failed.result(0)


def test_a_starting_node_reads_the_definitions_once(engine: Engine, make_node: Any) -> None:
    """init() reads them; the first tick finds the tasks version unchanged and does not read
    and validate them all again (10,000 definitions cost a node's start about a second)."""
    first = make_node()
    for i in range(5):
        first.register(TaskDefinition(id=f"once-{i}", name=f"Once {i}", cron="0 0 1 1 *"))
    reads: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if "FROM tasks ORDER BY" in " ".join(statement.split()):
            reads.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        node = make_node()
        node.start()
        wait_for_first_tick(node)
        assert len(reads) == 1, reads
        deadline = time.monotonic() + 10
        first.register(TaskDefinition(id="once-new", name="Once new", cron="0 0 1 1 *"))
        while node._node.planner.task("once-new") is None:
            assert time.monotonic() < deadline, "a changed tasks version was not read again"
            time.sleep(0.02)
        assert len(reads) == 2, reads
    finally:
        event.remove(engine, "before_cursor_execute", count)


# --- the idle tick ---------------------------------------------------------------------------


@pytest.fixture
def counted(engine: Engine) -> Iterator[list[str]]:
    """Every round trip the engine makes: statements, and the COMMITs, ROLLBACKs and pool
    check-outs (each check-out pre-pings a server) that carry no statement."""
    sent: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    listeners: list[tuple[Any, str, Any]] = [
        (engine, "before_cursor_execute", count), (engine, "commit", lambda conn: sent.append("COMMIT")),
        (engine, "rollback", lambda conn: sent.append("ROLLBACK")),
        (engine.pool, "checkout", lambda *_: sent.append("CHECKOUT"))]
    for target, name, listener in listeners:
        event.listen(target, name, listener)
    yield sent
    for target, name, listener in listeners:
        event.remove(target, name, listener)


def test_an_idle_tick_is_one_statement_and_one_round_trip(engine: Engine, make_node: Any, counted: list[str]) -> None:
    node = make_node(heartbeat_interval_ms=3_600_000)  # the heartbeat is measured by bench/idle.py
    for i in range(20):
        node.register(TaskDefinition(id=f"idle-{i}", name=f"Idle {i}", cron="0 0 1 1 *"))
    measured_ticks, statements = _idle_ticks(node, counted, lambda: True)
    # An idle tick is one statement on the node's held autocommit connection: no check-out
    # (pre-ping), BEGIN, COMMIT or ROLLBACK around it. A tick caught mid-way adds at most one.
    assert len(statements) <= measured_ticks + 1, statements
    assert all(s.lstrip().upper().startswith("SELECT") for s in statements), statements
    assert all("FROM executions" not in s or "min(" in s.lower() for s in statements), statements


def test_the_tick_line_reads_in_autocommit_and_replaces_a_dropped_connection(engine: Engine) -> None:
    kind = dialect_kind(engine)
    line = AutocommitLine(engine)
    try:
        backend_id = {"postgresql": "SELECT pg_backend_pid()", "mysql": "SELECT CONNECTION_ID()",
                      "sqlite": "SELECT 0"}[kind]
        first = line.one(text(backend_id))[0]
        assert engine.pool.checkedout() == 1  # type: ignore[attr-defined]  # the line holds one, between reads
        with engine.begin() as conn:  # a write committed elsewhere: the next read sees it (no held snapshot)
            conn.execute(insert(scheduler_meta), [{"name": "probe", "value": 7}])
        assert line.one(select(scheduler_meta.c.value).where(scheduler_meta.c.name == "probe"))[0] == 7
        with pytest.raises(DatabaseError):  # a failing read names itself and discards the connection
            line.one(text("SELECT * FROM no_such_table"))
        assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        assert line.one(text("SELECT 1"))[0] == 1
        if kind != "sqlite":
            current = line.one(text(backend_id))[0]
            with engine.begin() as conn:  # the server drops the held connection (restart, idle timeout)
                conn.execute(text("SELECT pg_terminate_backend(:pid)" if kind == "postgresql" else "KILL :pid"),
                             {"pid": current})
            assert line.one(text(backend_id))[0] not in (first, current)  # replaced, read at once
            assert engine.pool.checkedout() == 1  # type: ignore[attr-defined]
    finally:
        line.close()
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]  # close gave it back


def test_alert_rules_add_one_round_trip_to_an_idle_tick(engine: Engine, make_node: Any,
                                                              counted: list[str]) -> None:
    from scheduler_core.reach import Reach

    node = make_node(heartbeat_interval_ms=3_600_000)
    config = {"providers": [{"name": "log", "type": "console"}],
              "templates": [{"name": "alert", "provider": "log", "body": "{summary}"}],
              "alerts": [{"name": "all", "to": "ops", "template": "alert",
                          "events": ["execution.unknown", "execution.failed", "execution.missed", "task.blocked",
                                     "log.pending", "queue.dead", "node.lost", "cluster.idle"]}]}
    reach = Reach(engine, config, node_id=node.config.node_id)
    reach.init()
    reach.attach(node)
    try:
        _measure_idle_ticks_with_alerts(node, reach, counted)
    finally:
        reach.close()


def _idle_ticks(node: Any, counted: list[str], settled: Any) -> tuple[int, list[str]]:
    """Start ``node``, wait past start-up and until ``settled()``, then count what 10 ticks send
    (measured again when the window crossed a minute, whose first tick does a minute's work)."""
    ticks: list[int] = []
    node.add_tick_listener(ticks.append)
    node.start()
    deadline = time.monotonic() + 90
    for _ in range(3):
        while len(ticks) < 5 or not settled():  # past start-up: the first tick loads the definitions
            assert time.monotonic() < deadline, "the node does not tick"
            time.sleep(0.02)
        counted.clear()
        first = len(ticks)
        while len(ticks) < first + 10:
            assert time.monotonic() < deadline, "the node does not tick"
            time.sleep(0.02)
        measured = (len(ticks) - first, list(counted))
        if ticks[first - 1] // 60_000 == ticks[-1] // 60_000:
            break
    return measured


def _measure_idle_ticks_with_alerts(node: Any, reach: Any, counted: list[str]) -> None:
    measured_ticks, statements = _idle_ticks(  # past the first scan and the minute's delivery round
        node, counted, lambda: not (reach._round_lock.locked() or reach._alert_lock.locked()))
    # the tick's own statement and the alerts' probe; a tick caught mid-way adds at most two
    kinds = Counter(" ".join(s.split())[:40] + " .. " + " ".join(s.split())[-50:] for s in statements)
    assert len(statements) <= 2 * measured_ticks + 2, "\n".join(f"{n} x {k}" for k, n in kinds.items())
    assert all(s.lstrip().upper().startswith("SELECT") for s in statements), statements
