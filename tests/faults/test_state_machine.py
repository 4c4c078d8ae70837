"""A hypothesis state machine over the journal and slot rules, checked against the tables.

Rules drive the store's public API as nodes and operators do -- claim (batches, repeats,
busy slots, a retry after a lost answer), begin, renew, finish (one, or a group commit with its projection), expire at
once, the expiry scan with take over or settlement, a stale take over, resolve unknown
(compare-and-set) and ``repair_log`` -- with current and stale tokens, while the DB clock
moves on through its engine's test offset (``scheduler_core.testing``). A small model predicts every
answer; after every step the model is compared with the ``executions``, ``slots`` and ``logs``
tables (SELECTs, not return values) and the oracle's journal rules must hold.

Time: leases are 10 hours and the clock moves in steps of 4, 8 or 12 hours, so the few
seconds the test itself takes can never decide whether a lease has run out.

Examples: modest on SQLite, more on PostgreSQL and MariaDB (well under a minute per backend);
The search is derandomized (hypothesis picks its seed from the test, as its ``ci`` profile does), so
a CI run is repeatable and its check that the core transitions were reached cannot fail by luck;
``HAI_FAULT_STEPS`` multiplies the examples, the steps and the seeded walk for a longer search, and
that longer search draws fresh random sequences on every run.
A seeded walk of the same machine (no search, fixed seed) must reach every transition, so
that rare ones are checked on every run whatever the random search happened to try.
"""

from __future__ import annotations

import os
import random
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from sqlalchemy import delete
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig
from scheduler_core.db.tables import executions, logs, slots
from scheduler_core.model import Attempt, Execution
from scheduler_core.store import ClaimRequest, ExecutionRepository
from scheduler_core.store.executions import FinishRequest
from scheduler_core.testing import set_clock_offset
from tests.helpers.oracle import TaskSpec, check, read_journal

pytestmark = pytest.mark.slow
HOUR_MS = 3_600_000
LEASE_H = 10
TASKS = ("t0", "t1", "t2")
NODES = ("node-a", "node-b")
SCALE = max(1, int(os.environ.get("HAI_FAULT_STEPS", "1")))
REACHED: Counter[str] = Counter()  # transitions the rules made happen (the tests check they reached them)
EVERY_TRANSITION = {
    "claimed", "skipped (slot busy)", "began", "begin refused", "renewed", "renewal lost", "finished success",
    "finished failed", "finished unknown", "finished interrupted", "finish refused", "group commit",
    "group commit with a refused row", "expired at once", "settled unknown", "settled interrupted", "taken over",
    "stale take over refused", "resolved", "resolve refused", "repaired", "claim retry recognised",
    "claim retry refused"}
CORE_TRANSITIONS = {"claimed", "began", "taken over", "finish refused", "renewal lost"}
WALK_STEPS = 600
BUDGET = {"sqlite": (50, 40), "postgresql": (80, 40), "mysql": (70, 40)}  # (examples, steps) per backend


@dataclass
class Model:
    """What one journal row should say."""

    occurrence_id: str
    task_id: str
    status: str
    token: str
    deadline_h: float | None  # lease deadline in model hours (running only)
    sequence: int = 1
    attempts: list[Attempt] = field(default_factory=list)
    log_persistence: str | None = None
    reason: str | None = None
    stale_tokens: list[str] = field(default_factory=list)
    claim_token: str = ""  # the token it was claimed with (a lost-answer retry brings it again)

    def owned_by(self, token: str, now_h: float) -> bool:
        return self.status == "running" and token == self.token and not self.expired(now_h)

    def expired(self, now_h: float) -> bool:
        return self.status == "running" and self.deadline_h is not None and self.deadline_h < now_h


def _closed(attempts: list[Attempt], status: str) -> list[Attempt]:
    """The attempts with the last one closed (if open) as ``status``, as a runner records it."""
    if attempts and attempts[-1].status is None:
        return [*attempts[:-1], replace(attempts[-1], status=status, finished_at=2)]
    return list(attempts)


class JournalMachine(RuleBasedStateMachine):
    engine: Engine
    operator: Scheduler

    def __init__(self) -> None:
        super().__init__()
        with self.engine.begin() as conn:  # every example starts from empty tables
            for table in (logs, slots, executions):
                conn.execute(delete(table))
        self.now_h = 0.0
        set_clock_offset(self.engine, 0)
        self.repos = {node: ExecutionRepository(self.engine, node, LEASE_H * HOUR_MS) for node in NODES}
        self.rows: dict[str, Model] = {}
        self.slot: dict[str, tuple[str, str] | None] = {}  # task -> (occurrence, token)
        self.snapshots: list[Execution] = []  # rows as an expiry scan once returned them
        self.counter = 0  # ids and tokens are made from it: the same steps make the same ids

    def _new_id(self, kind: str) -> str:
        """A fresh id (ids order the rows the rules pick from, so they must not be random)."""
        self.counter += 1
        return f"{kind}-{self.counter:06d}"

    # --- helpers ----------------------------------------------------------------------

    def _any_running(self) -> bool:
        return any(r.status == "running" for r in self.rows.values())

    def _pick(self, pick: int, *statuses: str) -> Model | None:
        found = sorted((r for r in self.rows.values() if not statuses or r.status in statuses),
                       key=lambda r: r.occurrence_id)
        return found[pick % len(found)] if found else None

    def _token(self, row: Model, stale: bool) -> str:
        return row.stale_tokens[-1] if stale and row.stale_tokens else row.token

    def _repo(self, pick: int) -> ExecutionRepository:
        return self.repos[NODES[pick % len(NODES)]]

    def _current(self, row: Model) -> Execution:
        found = self.repos[NODES[0]].get(row.occurrence_id)
        assert found is not None
        return found

    def _release(self, row: Model) -> None:
        if self.slot.get(row.task_id) is not None and self.slot[row.task_id][0] == row.occurrence_id:  # type: ignore[index]
            self.slot[row.task_id] = None

    # --- nodes ------------------------------------------------------------------------

    @rule(picks=st.lists(st.integers(0, 2), min_size=1, max_size=3), repeat=st.booleans(), node=st.integers(0, 1),
          which=st.integers(0, 10**6))
    def claim(self, picks: list[int], repeat: bool, node: int, which: int) -> None:
        fresh = [ClaimRequest(self._new_id("occ"), TASKS[p], 1, "manual", 1, self._new_id("tok")) for p in picks]
        old = self._pick(which) if repeat else None
        again = [ClaimRequest(old.occurrence_id, old.task_id, 1, "manual", 1, self._new_id("tok"))] if old else []
        results = {r.occurrence_id: r.outcome for r in self._repo(node).claim([*fresh, *again])}
        if old is not None:
            assert results[old.occurrence_id] == "exists", results
        for task in {r.task_id for r in fresh}:
            mine = [r for r in fresh if r.task_id == task]
            outcomes = sorted(results[r.occurrence_id] for r in mine)
            free = self.slot.get(task) is None
            assert outcomes == (["claimed"] if free else []) + ["skipped"] * (len(mine) - free), (task, outcomes)
            for r in mine:
                won = results[r.occurrence_id] == "claimed"
                self.rows[r.occurrence_id] = Model(r.occurrence_id, task, "running" if won else "skipped", r.token,
                                                   self.now_h + LEASE_H if won else None,
                                                   reason=None if won else "slot_busy", claim_token=r.token)
                REACHED["claimed" if won else "skipped (slot busy)"] += 1
                if won:
                    self.slot[task] = (r.occurrence_id, r.token)

    @rule(which=st.integers(0, 10**6), own=st.booleans(), node=st.integers(0, 1), running=st.booleans())
    def retry_claim(self, which: int, own: bool, node: int, running: bool = False) -> None:
        """A claim retried after its COMMIT's answer was lost (``retry``): with the claimer's
        own token the row comes back ``claimed`` only while untouched -- still its own, still
        running, no attempt begun -- or ``skipped`` if it was skipped; anything else, or any
        other token, is ``exists``. Nothing changes."""
        row = self._pick(which, "running") if running else self._pick(which)
        if row is None:
            return
        token = row.claim_token if own else f"stranger-{which}"
        request = ClaimRequest(row.occurrence_id, row.task_id, 1, "manual", 1, token, retry=True)
        (result,) = self._repo(node).claim([request])
        unchanged = token == row.claim_token == row.token
        expected = ("claimed" if unchanged and row.status == "running" and not row.attempts
                    else "skipped" if unchanged and row.status == "skipped" else "exists")
        assert result.outcome == expected, (result, row)
        REACHED["claim retry recognised" if expected == "claimed" else "claim retry refused"] += 1

    @precondition(lambda self: self._any_running())
    @rule(which=st.integers(0, 10**6), stale=st.booleans(), node=st.integers(0, 1))
    def begin(self, which: int, stale: bool, node: int) -> None:
        row = self._pick(which, "running")
        if row is None:
            return
        token = self._token(row, stale)
        log_id = str(uuid.uuid5(uuid.NAMESPACE_OID, self._new_id("log")))
        attempt = Attempt(log_id=log_id, attempt=len(row.attempts) + 1, sequence=row.sequence, node_id=NODES[node],
                          started_at=1)
        attempts = [*_closed(row.attempts, "failed"), attempt]
        began = self._repo(node).begin_attempt(row.occurrence_id, token, attempts)
        assert began == row.owned_by(token, self.now_h)
        REACHED["began" if began else "begin refused"] += 1
        if began:
            row.attempts, row.deadline_h = attempts, self.now_h + LEASE_H

    @rule(picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=3), stale=st.booleans(), node=st.integers(0, 1),
          any_row=st.booleans())
    def renew(self, picks: list[int], stale: bool, node: int, any_row: bool) -> None:
        """A lease keeper renews its tokens (the first one maybe of any row: finished, skipped, ...)."""
        chosen = [row for i, p in enumerate(picks)
                  if (row := self._pick(p) if any_row and i == 0 else self._pick(p, "running")) is not None]
        tokens = sorted({self._token(row, stale and i == 0) for i, row in enumerate(chosen)})
        if not tokens:
            return
        lost = self._repo(node).renew(tokens)
        alive = {r.token: r for r in self.rows.values() if r.owned_by(r.token, self.now_h)}
        assert lost == {t for t in tokens if t not in alive}, (lost, tokens)
        REACHED["renewal lost" if lost else "renewed"] += 1
        for token in tokens:
            if token in alive:
                alive[token].deadline_h = self.now_h + LEASE_H

    @precondition(lambda self: self._any_running())
    @rule(which=st.integers(0, 10**6), outcome=st.sampled_from(["success", "failed", "interrupted", "unknown"]),
          stale=st.booleans(), node=st.integers(0, 1))
    def finish(self, which: int, outcome: str, stale: bool, node: int) -> None:
        row = self._pick(which, "running")
        if row is None:
            return
        status = outcome if row.attempts else "interrupted"  # unknown only once a handler may have run
        attempts = _closed(row.attempts, status)
        token = self._token(row, stale)
        done = self._repo(node).finish(self._current(row), token, status, None, attempts, status != "unknown")
        assert done == row.owned_by(token, self.now_h)
        REACHED[f"finished {status}" if done else "finish refused"] += 1
        if done:
            self._finished(row, status, attempts)

    @precondition(lambda self: self._any_running())
    @rule(which=st.integers(0, 10**6), outcome=st.sampled_from(["unknown", "success", "failed"]),
          node=st.integers(0, 1))
    def run_attempt(self, which: int, outcome: str, node: int) -> None:
        """A runner's usual path: begin an attempt, then the terminal commit of its outcome."""
        self.begin(which, False, node)
        row = self._pick(which, "running")
        if row is not None and row.attempts and row.attempts[-1].status is None:
            self.finish(which, outcome, False, node)

    @precondition(lambda self: self._any_running())
    @rule(which=st.integers(0, 10**6), node=st.integers(0, 1))
    def owner_vanishes(self, which: int, node: int) -> None:
        """An owner begins its attempt and is gone: its lease is given up (as close() does for
        an idempotent task) and the next expiry scan must deal with a begun attempt."""
        self.begin(which, False, node)
        self.expire_now(which, False, node)

    @precondition(lambda self: self._any_running())
    @rule(which=st.integers(0, 10**6), node=st.integers(0, 1))
    def peer_takes_over(self, which: int, node: int) -> None:
        """An owner's lease ends (given up at once, as when it dies) and the other node's expiry
        scan takes a row over, as it does for an idempotent task."""
        self.expire_now(which, False, node)
        self.recover(which, True, 1 - node)

    def _finished(self, row: Model, status: str, attempts: list[Attempt], persisted: bool = False) -> None:
        row.status, row.attempts, row.deadline_h = status, attempts, None
        row.log_persistence = ("persisted" if persisted else "pending") if attempts else None
        if status != "unknown":
            self._release(row)

    @precondition(lambda self: self._any_running())
    @rule(picks=st.lists(st.integers(0, 10**6), min_size=2, max_size=3), stale=st.booleans(), node=st.integers(0, 1))
    def finish_group(self, picks: list[int], stale: bool, node: int) -> None:
        """The group commit of several runners, with the log projection in the same transaction."""
        chosen = {row.occurrence_id: row for p in picks if (row := self._pick(p, "running")) is not None}
        requests, planned = [], {}
        for i, row in enumerate(chosen.values()):
            status = "success" if row.attempts else "interrupted"
            attempts, token = _closed(row.attempts, status), self._token(row, stale and i == 0)
            requests.append(FinishRequest(self._current(row), token, status, None, tuple(attempts), True))
            planned[row.occurrence_id] = (status, attempts, row.owned_by(token, self.now_h))
        if not requests:
            return
        result = self._repo(node).finish_many(requests, project=True)
        assert set(result.committed) == {occ for occ, (_, _, owned) in planned.items() if owned}
        assert result.projection_error is None
        REACHED["group commit with a refused row" if len(result.committed) < len(requests) else "group commit"] += 1
        for occ in result.committed:
            status, attempts, _ = planned[occ]
            self._finished(chosen[occ], status, attempts, persisted=bool(attempts))

    @precondition(lambda self: self._any_running())
    @rule(which=st.integers(0, 10**6), stale=st.booleans(), node=st.integers(0, 1))
    def expire_now(self, which: int, stale: bool, node: int) -> None:
        row = self._pick(which, "running")
        if row is None:
            return
        token = self._token(row, stale)
        given_up = self._repo(node).expire_now(row.occurrence_id, token)
        assert given_up == row.owned_by(token, self.now_h)
        REACHED["expired at once" if given_up else "expire refused"] += 1
        if given_up:
            row.deadline_h = self.now_h - 0.5  # "one millisecond ago"

    @rule(hours=st.sampled_from([4, 8, 12]))
    def advance_clock(self, hours: int) -> None:
        self.now_h += hours
        set_clock_offset(self.engine, int(self.now_h * HOUR_MS))

    # --- recovery ---------------------------------------------------------------------

    @precondition(lambda self: self._any_running())
    @rule(which=st.integers(0, 10**6), take=st.booleans(), node=st.integers(0, 1))
    def recover(self, which: int, take: bool, node: int) -> None:
        """The expiry scan, then take over (idempotent) or settle (unknown / interrupted)."""
        found = self._repo(node).expired()
        assert {e.occurrence_id for e in found} == {r.occurrence_id for r in self.rows.values()
                                                     if r.expired(self.now_h)}
        if not found:
            return
        execution = found[which % len(found)]
        self.snapshots.append(execution)
        row = self.rows[execution.occurrence_id]
        if take:
            self._take_over(execution, row, node)
            return
        attempts = _closed(row.attempts, "unknown")
        status, reason = ("unknown", "lease_expired") if attempts else ("interrupted", "owner_lost_before_start")
        repo = self._repo(node)
        assert (repo.mark_interrupted if status == "interrupted" else repo.mark_unknown)(execution, reason, attempts)
        REACHED[f"settled {status}"] += 1
        row.reason = reason
        self._finished(row, status, attempts)

    def _take_over(self, execution: Execution, row: Model, node: int) -> bool:
        token = self._new_id("tok")
        expected = row.status == "running" and row.token == execution.execution_token and row.expired(self.now_h)
        taken = self._repo(node).take_over(execution, token)
        assert taken == expected
        REACHED["taken over" if taken else "stale take over refused"] += 1
        if taken:
            row.stale_tokens.append(row.token)
            row.token, row.sequence, row.deadline_h = token, row.sequence + 1, self.now_h + LEASE_H
            self.slot[row.task_id] = (row.occurrence_id, token)
        return taken

    @rule(which=st.integers(0, 10**6), node=st.integers(0, 1))
    def take_over_stale(self, which: int, node: int) -> None:
        """A take over from an old expiry scan: applies only if nothing changed since."""
        if self.snapshots:
            execution = self.snapshots[which % len(self.snapshots)]
            self._take_over(execution, self.rows[execution.occurrence_id], node)

    # --- operators ----------------------------------------------------------------------

    @rule(which=st.integers(0, 10**6), status=st.sampled_from(["success", "discarded"]), stale=st.booleans(),
          any_row=st.booleans())
    def resolve_unknown(self, which: int, status: str, stale: bool, any_row: bool) -> None:
        row = self._pick(which) if any_row else self._pick(which, "unknown")
        if row is None:
            return
        current = self._current(row)
        version = current.updated_at - (1 if stale else 0)
        try:
            self.operator.execution.resolve_unknown(row.occurrence_id, status, version, "operator", "checked")
            resolved = True
        except Exception as exc:
            assert getattr(exc, "code", None), exc  # a SchedulerError with its stable code
            resolved = False
        assert resolved == (row.status == "unknown" and not stale)
        REACHED["resolved" if resolved else "resolve refused"] += 1
        if resolved:
            row.status = status
            self._release(row)

    @rule(which=st.integers(0, 10**6), any_row=st.booleans())
    def repair_log(self, which: int, any_row: bool) -> None:
        row = self._pick(which) if any_row else self._pick(which, "success", "failed", "interrupted", "unknown",
                                                          "discarded")
        if row is None:
            return
        result = self.operator.execution.repair_log(row.occurrence_id)
        assert result.repaired == (row.log_persistence == "pending")
        REACHED["repaired" if result.repaired else "nothing to repair"] += 1
        if result.repaired:
            row.log_persistence = "persisted"
        assert result.log_persistence == row.log_persistence

    # --- the model against the tables ---------------------------------------------------

    @invariant()
    def tables_match_the_model(self) -> None:
        journal = read_journal(self.engine)
        stored = {r["occurrence_id"]: r for r in journal.executions}
        assert set(stored) == set(self.rows)
        for occ, model in self.rows.items():
            row = stored[occ]
            seen = (row["status"], row["sequence"], [a["status"] for a in row["attempts"]], row["log_persistence"])
            assert seen == (model.status, model.sequence, [a.status for a in model.attempts],
                            model.log_persistence), (occ, seen, model)
            if model.reason is not None:
                assert row["reason"] == model.reason
            if model.status in ("running", "unknown"):
                assert row["execution_token"] == model.token
            if model.status == "running":
                assert (int(row["lease_until"]) < journal.now_ms) == model.expired(self.now_h), (occ, model)
        held = {s["task_id"]: (s["occurrence_id"], s["execution_token"]) for s in journal.slots
                if s["occurrence_id"] is not None}
        assert held == {task: holder for task, holder in self.slot.items() if holder is not None}
        projected = {a.log_id for r in self.rows.values() if r.log_persistence == "persisted" for a in r.attempts}
        assert {log["id"] for log in journal.logs} == projected
        specs = [TaskSpec(task, "* * * * *", tracked=False) for task in TASKS]
        assert check(journal, None, specs, [], settled=False) == []


@pytest.fixture
def operator(engine: Engine) -> Iterator[Scheduler]:
    """The operator's API (resolve_unknown, repair_log) on the test database."""
    node = Scheduler(engine, SchedulerConfig(node_id="operator"))
    node.init()
    yield node
    node.close()


def _machine(engine: Engine, operator: Scheduler) -> type[JournalMachine]:
    return type("Machine", (JournalMachine,), {"engine": engine, "operator": operator})


def test_journal_and_slot_rules_hold_under_any_sequence(backend: str, engine: Engine, operator: Scheduler) -> None:
    examples, steps = BUDGET[backend]
    REACHED.clear()
    run_state_machine_as_test(_machine(engine, operator), settings=settings(
        max_examples=examples * SCALE, stateful_step_count=steps * SCALE, deadline=None, database=None,
        derandomize=SCALE == 1,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
    missing = CORE_TRANSITIONS - set(REACHED)
    assert not missing, f"the search never reached {sorted(missing)} ({dict(REACHED)}): raise the budget"


def _seeded_step(machine: JournalMachine, rng: random.Random) -> None:
    """One rule with arguments from ``rng`` (what hypothesis does, minus the search)."""
    which, node, stale = rng.randrange(10**6), rng.randrange(2), rng.random() < 0.3
    running = machine._any_running()
    choices: list[tuple[int, Callable[[], None]]] = [
        (4, lambda: machine.claim([rng.randrange(3) for _ in range(rng.randint(1, 3))], rng.random() < 0.2, node,
                                  which)),
        (2, lambda: machine.renew([rng.randrange(10**6) for _ in range(rng.randint(1, 3))], stale, node,
                                  rng.random() < 0.3)),
        (2, lambda: machine.advance_clock(rng.choice([4, 8, 12]))),
        (1, lambda: machine.take_over_stale(which, node)),
        (2, lambda: machine.resolve_unknown(which, rng.choice(["success", "discarded"]), stale, rng.random() < 0.3)),
        (2, lambda: machine.repair_log(which, rng.random() < 0.3)),
    ]
    if running:
        choices += [
            (3, lambda: machine.begin(which, stale, node)),
            (2, lambda: machine.finish(which, rng.choice(["success", "failed", "interrupted", "unknown"]), stale,
                                       node)),
            (3, lambda: machine.run_attempt(which, rng.choice(["success", "failed", "unknown"]), node)),
            (2, lambda: machine.finish_group([rng.randrange(10**6) for _ in range(rng.randint(2, 3))], stale, node)),
            (1, lambda: machine.expire_now(which, stale, node)),
            (1, lambda: machine.owner_vanishes(which, node)),
            (2, lambda: machine.recover(which, rng.random() < 0.5, node)),
        ]
    weights, actions = zip(*choices, strict=True)
    rng.choices(actions, weights)[0]()


def test_a_seeded_walk_reaches_every_transition(backend: str, engine: Engine, operator: Scheduler) -> None:
    """The same machine driven by a fixed seed: deterministic, and it must reach every
    transition of the rules (the search above is random and may miss rare ones in one run)."""
    REACHED.clear()
    rng = random.Random(7)
    machine = _machine(engine, operator)()
    retries = random.Random(11)  # its own stream: the retries change nothing, nor the walk above
    for _ in range(WALK_STEPS * SCALE):
        _seeded_step(machine, rng)
        if retries.random() < 0.1:
            machine.retry_claim(retries.randrange(10**6), retries.random() < 0.7, retries.randrange(2),
                                retries.random() < 0.7)
        machine.tables_match_the_model()
    missing = EVERY_TRANSITION - set(REACHED)
    assert not missing, f"the walk never reached {sorted(missing)} in {WALK_STEPS} steps ({dict(REACHED)})"
