"""Leases on every database: takeover, isolation, lost leases, close(), lock waits."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from sqlalchemy import event, text, update
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, TaskDefinition
from scheduler_core.cron import new_occurrence_id
from scheduler_core.db import close_engine, create_engine
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import executions, tasks
from scheduler_core.model import Attempt
from scheduler_core.store import ClaimRequest, ExecutionRepository
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.conftest import TestDatabase
from tests.helpers.journal import (
    abandon_running_execution,
    db_now,
    execution_row,
    insert_rows,
    slot_holder,
    wait_for_status,
)
from tests.helpers.statements import counting


def _node(make_node: Any, hooks: Any = None, **config: Any) -> Scheduler:
    config.setdefault("lease_ms", 1000)
    return make_node(hooks=hooks, **config)  # type: ignore[no-any-return]


def _blocked_trigger(node: Scheduler) -> tuple[threading.Thread, list[Any]]:
    """Trigger "job" on a thread; returns once its handler is running (and waiting)."""
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(node.trigger("job")))
    worker.start()
    return worker, result


def _waiting_hook(entered: threading.Event) -> Any:
    def execute(event: Any) -> Any:
        entered.set()
        event.signal.wait(20)
        return "ok"

    return execute


def _task(**fields: Any) -> TaskDefinition:
    return TaskDefinition(id="job", name="Job", cron="0 2 * * *", **fields)


def test_idempotent_execution_is_taken_over_with_the_same_occurrence(engine: Engine,
                                                                     make_node: Any) -> None:
    seen: list[Any] = []
    node = _node(make_node, hooks={"on_task_execute": lambda e: seen.append(e.context) or "ok"})
    node.register(_task(idempotent=True, retry={"max_attempts": 3}))
    occurrence = abandon_running_execution(engine, "job", started=True, max_attempts=3)
    node.start()
    done = wait_for_status(node, occurrence, "success")
    assert (done.sequence, done.attempt) == (2, 2)
    assert [a.status for a in done.attempts] == ["unknown", "success"]
    assert [(c.occurrence_id, c.sequence, c.attempt) for c in seen] == [(occurrence, 2, 2)]
    assert slot_holder(engine, "job") is None
    assert len(node.get_logs(task_id="job")) == 2


def test_idempotent_execution_without_budget_becomes_unknown(engine: Engine, make_node: Any) -> None:
    node = _node(make_node, hooks={"on_task_execute": lambda e: "ok"})
    node.register(_task(idempotent=True))
    occurrence = abandon_running_execution(engine, "job", started=True, max_attempts=1)
    node.start()
    assert wait_for_status(node, occurrence, "unknown").reason == "attempts_exhausted"
    assert slot_holder(engine, "job") == occurrence


def test_never_started_execution_is_interrupted_and_frees_the_slot(engine: Engine,
                                                                    make_node: Any) -> None:
    node = _node(make_node, hooks={"on_task_execute": lambda e: "ok"})
    node.register(_task())
    occurrence = abandon_running_execution(engine, "job", started=False)
    node.start()
    assert wait_for_status(node, occurrence, "interrupted").reason == "owner_lost_before_start"
    assert slot_holder(engine, "job") is None


def test_lost_lease_cancels_the_attempt_and_publishes_nothing(engine: Engine, make_node: Any) -> None:
    entered = threading.Event()
    node = _node(make_node, hooks={"on_task_execute": _waiting_hook(entered)})
    node.register(_task())
    worker, result = _blocked_trigger(node)
    assert entered.wait(10)
    with engine.begin() as conn:  # the lease runs out (as if the node had stalled)
        conn.execute(update(executions).values(lease_until=0))
    worker.join(20)
    log = result[0]
    assert log.persistence.status == "unconfirmed"
    assert node.execution.get(log.occurrence_id).status == "running"  # nothing published


def test_close_marks_a_started_non_idempotent_attempt_unknown(engine: Engine, make_node: Any) -> None:
    entered = threading.Event()
    node = _node(make_node, hooks={"on_task_execute": _waiting_hook(entered)})
    node.register(_task())
    worker, result = _blocked_trigger(node)
    assert entered.wait(10)
    node.close()
    worker.join(20)
    assert result[0].status == "unknown"
    assert slot_holder(engine, "job") == result[0].occurrence_id


def test_close_leaves_a_started_idempotent_attempt_for_takeover(engine: Engine, make_node: Any) -> None:
    entered = threading.Event()
    first = _node(make_node, hooks={"on_task_execute": _waiting_hook(entered)}, node_id="first")
    first.register(_task(idempotent=True, retry={"max_attempts": 2}))
    worker, result = _blocked_trigger(first)
    assert entered.wait(10)
    first.close()
    worker.join(20)
    assert result[0].persistence.status == "unconfirmed"
    second = _node(make_node, hooks={"on_task_execute": lambda e: "ok"}, node_id="second")
    second.start()
    done = wait_for_status(second, result[0].occurrence_id, "success", timeout=10)
    assert done.sequence == 2 and done.owner_node == "second"


def test_finish_that_waited_on_a_row_lock_past_its_deadline_is_refused(server_database: TestDatabase) -> None:
    engine = create_engine(server_database.url)
    try:
        owner = ExecutionRepository(engine, "owner", 1000)
        token, occurrence = str(uuid.uuid4()), new_occurrence_id()
        (_claimed,) = owner.claim([ClaimRequest(occurrence, "job", 1, "manual", 1, token)])
        attempt = Attempt(log_id=str(uuid.uuid4()), attempt=1, sequence=1, node_id="owner", started_at=1,
                          finished_at=2, status="success")
        assert owner.begin_attempt(occurrence, token, [attempt])
        execution = owner.get(occurrence)
        assert execution is not None
        outcome: list[bool] = []
        with engine.connect() as locker:
            locker.begin()
            locker.execute(text("SELECT occurrence_id FROM executions WHERE occurrence_id = :o FOR UPDATE"),
                           {"o": occurrence})
            finisher = threading.Thread(target=lambda: outcome.append(
                owner.finish(execution, token, "success", None, [attempt], True)))
            finisher.start()
            time.sleep(1.6)  # the lease (1 s) runs out while the finish waits for the row lock
            locker.commit()
        finisher.join(20)
        assert outcome == [False]
        after = owner.get(occurrence)
        assert after is not None and after.status == "running"
    finally:
        close_engine(engine)


def test_the_keeper_renews_about_every_third_of_a_lease(engine: Engine, make_node: Any) -> None:
    """lease 3 s: a renewal a second, neither a busy loop nor a pause that lets the lease run out."""
    renewals: list[float] = []

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE EXECUTIONS SET LEASE_UNTIL"):
            renewals.append(time.monotonic())

    entered = threading.Event()
    node = _node(make_node, hooks={"on_task_execute": _waiting_hook(entered)}, lease_ms=3000)
    node.register(_task())
    worker, _result = _blocked_trigger(node)
    assert entered.wait(10)
    event.listen(engine, "before_cursor_execute", count)
    try:
        time.sleep(4.5)
    finally:
        event.remove(engine, "before_cursor_execute", count)
        node.close()
        worker.join(20)
    assert 3 <= len(renewals) <= 6, f"{len(renewals)} renewals in 4.5 s"


def test_attempt_times_follow_the_database_clock(engine: Engine, make_node: Any) -> None:
    """Attempts are stamped with the DB clock estimate (the last DB reading plus the local time
    since): here the DB clock runs a day ahead of this machine's, and the stamps follow it."""
    set_clock_offset(engine, clock_offset(engine) + 86_400_000)
    node = _node(make_node, hooks={"on_task_execute": lambda event: time.sleep(0.5) or "ok"})
    node.register(_task())
    before = db_now(engine)
    log = node.trigger("job")
    after = db_now(engine)
    assert log.started_at is not None and log.finished_at is not None
    assert before - 1000 <= log.started_at <= log.finished_at <= after + 1000
    assert log.finished_at - log.started_at >= 400


def test_close_waits_for_the_lease_keeper(make_node: Any) -> None:
    node = _node(make_node)
    assert any(thread.name == "hai-lease-keeper" for thread in threading.enumerate())
    node.close()
    assert not [thread for thread in threading.enumerate() if thread.name == "hai-lease-keeper"]


def test_a_process_that_never_calls_close_still_exits(database: TestDatabase) -> None:
    """The lease keeper is a daemon thread: a script that forgets close() ends when its main
    thread does, rather than hanging on a keeper that renews forever."""
    script = ("import sys; from scheduler_core import Scheduler, SchedulerConfig; "
              "from scheduler_core.db import create_engine; "
              "node = Scheduler(create_engine(sys.argv[1]), SchedulerConfig(node_id='forgetful', lease_ms=1000)); "
              "node.init(); print('ok', flush=True)")
    done = subprocess.run([sys.executable, "-c", script, database.url], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr[-2000:]


# A claim whose lease has already run out when its attempt begins (as if the node had stalled
# between the two): the claim's row is written with an expired lease.
_EXPIRED_AT_CLAIM = {
    "sqlite": ["""CREATE TRIGGER expire_at_claim AFTER INSERT ON executions
                  BEGIN UPDATE executions SET lease_until = 0 WHERE occurrence_id = NEW.occurrence_id; END"""],
    "postgresql": ["""CREATE FUNCTION expire_at_claim() RETURNS trigger LANGUAGE plpgsql AS $$
                      BEGIN NEW.lease_until := 0; RETURN NEW; END $$""",
                   """CREATE TRIGGER expire_at_claim BEFORE INSERT ON executions
                      FOR EACH ROW EXECUTE FUNCTION expire_at_claim()"""],
    "mysql": ["CREATE TRIGGER expire_at_claim BEFORE INSERT ON executions FOR EACH ROW SET NEW.lease_until = 0"],
}
_CLAIM_AS_USUAL = {
    "sqlite": ["DROP TRIGGER expire_at_claim"],
    "postgresql": ["DROP TRIGGER expire_at_claim ON executions", "DROP FUNCTION expire_at_claim()"],
    "mysql": ["DROP TRIGGER expire_at_claim"],
}


def _statements(engine: Engine, statements: list[str]) -> None:
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(text(statement))


def test_a_lease_lost_before_the_attempt_began_never_runs_the_handler(engine: Engine, make_node: Any) -> None:
    ran: list[Any] = []
    node = _node(make_node, hooks={"on_task_execute": lambda event: ran.append(event) or "ok"})
    node.register(_task())
    kind = dialect_kind(engine)
    _statements(engine, _EXPIRED_AT_CLAIM[kind])
    try:
        log = node.trigger("job")
    finally:
        _statements(engine, _CLAIM_AS_USUAL[kind])
    assert ran == []
    assert log.persistence.status == "unconfirmed"
    assert node.execution.get(log.occurrence_id).attempts == ()


def test_a_retry_whose_definition_became_unreadable_is_interrupted_and_frees_the_slot(engine: Engine,
                                                                                        make_node: Any) -> None:
    attempts: list[int] = []

    def execute(event: Any) -> Any:
        attempts.append(event.context.attempt)
        raise RuntimeError("the first attempt fails")

    node = _node(make_node, hooks={"on_task_execute": execute})
    node.register(_task(idempotent=True, retry={"max_attempts": 3, "backoff_ms": [1500]}))
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(node.trigger("job")))
    worker.start()
    deadline = time.monotonic() + 15
    while attempts != [1]:
        assert time.monotonic() < deadline, "the first attempt did not run"
        time.sleep(0.02)
    with engine.begin() as conn:  # during the backoff, the stored definition becomes unreadable
        conn.execute(update(tasks).where(tasks.c.id == "job").values(cron="not cron"))
    worker.join(20)
    execution = node.execution.get(result[0].occurrence_id)
    assert (execution.status, execution.reason) == ("interrupted", "unreadable")
    assert attempts == [1] and slot_holder(engine, "job") is None


def test_a_retry_cancelled_while_it_runs_overrules_its_own_attempt(engine: Engine, make_node: Any) -> None:
    """Deleting the task cancels the second attempt: that attempt is recorded interrupted, and
    the first keeps its own outcome."""
    entered = threading.Event()

    def execute(event: Any) -> Any:
        if event.context.attempt == 1:
            raise RuntimeError("the first attempt fails")
        entered.set()
        event.signal.wait(20)
        return "ok"

    node = _node(make_node, hooks={"on_task_execute": execute})
    node.register(_task(idempotent=True, retry={"max_attempts": 3, "backoff_ms": [100]}))
    worker, result = _blocked_trigger(node)
    assert entered.wait(15)
    node.unregister("job")
    worker.join(20)
    execution = node.execution.get(result[0].occurrence_id)
    assert (execution.status, execution.reason) == ("interrupted", "deleted")
    assert [(a.attempt, a.status) for a in execution.attempts] == [(1, "failed"), (2, "interrupted")]
    assert execution.attempts[1].result is None  # the cancelled handler's answer is not kept


def _until(predicate: Any, what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_an_execution_the_scan_settles_unknown_has_its_log_projected(engine: Engine, make_node: Any) -> None:
    node = _node(make_node, hooks={"on_task_execute": lambda e: "ok"})
    node.register(_task())
    occurrence = abandon_running_execution(engine, "job", started=True)
    node.start()
    assert wait_for_status(node, occurrence, "unknown").reason == "lease_expired"
    _until(lambda: node.get_logs(task_id="job"), "the unknown attempt never reached the log table")
    (log,) = node.get_logs(task_id="job")
    assert (log.occurrence_id, log.status, log.node_id) == (occurrence, "unknown", "ghost")


def test_a_takeover_hands_the_slot_to_the_new_owner(engine: Engine, make_node: Any) -> None:
    """The slot keeps the occurrence and takes the new owner's token while the takeover runs."""
    holders: list[tuple[Any, ...]] = []
    observer = ExecutionRepository(engine, "observer", 60_000)

    def execute(event: Any) -> Any:
        holders.append((event.context.occurrence_id, event.context.execution_token, observer.slot_holder("job")))
        return "ok"

    node = _node(make_node, hooks={"on_task_execute": execute})
    node.register(_task(idempotent=True, retry={"max_attempts": 3}))
    occurrence = abandon_running_execution(engine, "job", started=True, max_attempts=3)
    node.start()
    wait_for_status(node, occurrence, "success")
    ((seen_occurrence, token, holder),) = holders
    assert seen_occurrence == occurrence and holder == (occurrence, token)


def test_a_lost_lease_cancels_only_its_own_attempt(engine: Engine, make_node: Any) -> None:
    """One renewal covers every execution the node owns; the row that is lost is answered
    lost, and the others go on (renewed) for leases to come."""
    entered = {"lost": threading.Event(), "kept": threading.Event()}
    cancelled: dict[str, float] = {}

    def execute(event: Any) -> Any:
        task_id = event.context.task_id
        entered[task_id].set()
        if event.signal.wait(6 if task_id == "kept" else 20):
            cancelled[task_id] = time.monotonic()
        return "ok"

    node = _node(make_node, hooks={"on_task_execute": execute})
    for task_id in entered:
        node.register(TaskDefinition(id=task_id, name=task_id, cron="0 2 * * *"))
    occurrences = {task_id: node.submit(task_id) for task_id in entered}
    assert all(event.wait(10) for event in entered.values())
    with engine.begin() as conn:
        conn.execute(update(executions).where(executions.c.occurrence_id == occurrences["lost"])
                     .values(lease_until=0))
    _until(lambda: "lost" in cancelled, "the lost lease was not answered")
    assert wait_for_status(node, occurrences["kept"], "success", timeout=20).status == "success"
    assert "kept" not in cancelled  # renewed for six leases


def test_each_takeover_counts_the_sequence_up_by_one(engine: Engine, make_node: Any) -> None:
    """A ghost's run is taken over (sequence 2); that run loses its lease in turn and is taken
    over again (sequence 3): every owner of an occurrence has the next sequence number."""
    seen: list[tuple[int, int]] = []
    first = threading.Event()

    def execute(event: Any) -> Any:
        seen.append((event.context.sequence, event.context.attempt))
        if len(seen) == 1:
            first.set()
            event.signal.wait(20)  # until the lease is lost
        return "ok"

    node = _node(make_node, hooks={"on_task_execute": execute})
    node.register(_task(idempotent=True, retry={"max_attempts": 3}))
    occurrence = abandon_running_execution(engine, "job", started=True, max_attempts=3)
    node.start()
    assert first.wait(15)
    with engine.begin() as conn:  # the first takeover's lease runs out (as if its node had stalled)
        conn.execute(update(executions).where(executions.c.occurrence_id == occurrence).values(lease_until=0))
    done = wait_for_status(node, occurrence, "success")
    assert seen == [(2, 2), (3, 3)]
    assert (done.sequence, [a.sequence for a in done.attempts]) == (3, [1, 2, 3])


def test_a_lost_answer_is_read_back_for_many_occurrences_in_one_statement_per_500(engine: Engine) -> None:
    """``held``: which occurrences run under the token a write whose answer was lost carried.
    Only a running row under that token counts (not another token, not a settled row, not a
    missing one), and 700 are asked in two statements, not one per row."""
    rows = []
    for i in range(700):
        status = "success" if i % 7 == 3 else "running"
        row = execution_row(f"occ-{i}", 1_000, status=status)
        rows.append({**row, "execution_token": f"tok-{i}" if i % 5 else f"other-{i}"})
    insert_rows(engine, executions, rows)
    tokens = {f"occ-{i}": f"tok-{i}" for i in range(700)} | {"occ-absent": "tok-x"}
    repository = ExecutionRepository(engine, "node-a", 1_000)
    with counting(engine) as one:
        assert repository.held({"occ-1": "tok-1"}) == {"occ-1"}
    with counting(engine) as count:
        held = repository.held(tokens)
    assert held == {f"occ-{i}" for i in range(700) if i % 7 != 3 and i % 5}
    assert (count.statements - one.statements, count.transactions) == (1, 1)  # one more SELECT, one transaction
    assert repository.held({}) == set()
