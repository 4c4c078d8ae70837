"""Database connection faults between a node and PostgreSQL / MariaDB, through a TCP proxy.

The owner ("remote", tests/helpers/fault_node.py) talks to the database only through
tests/helpers/tcp_proxy.py; a live node in this process ("survivor") talks to it directly.
The remote claims a task due in the current DB minute, and then:

====================  ========================================================================
cut                   every connection is closed while the handler runs: the pool reconnects,
                      the lease is renewed, the owner finishes (sequence 1, one effect)
delay                 all traffic is held for three leases while the handler runs: the survivor
                      takes over (idempotent) or isolates (unknown); the late statements then
                      reach the database and are refused -- the remote publishes nothing
hang                  the link accepts but never forwards: as delay, and the remote's statements
                      never arrive (the test cuts the link at the end so the node can stop)
lost claim ack        the claim's COMMIT reaches the server, its answer is lost: the remote
                      retries the claim with the same token, finds its own row and runs it
                      (sequence 1, one effect), idempotent or not
lost begin ack        the same for the COMMIT that records the attempt's start: the remote
                      writes the begin again (the same attempts: it changes nothing) and runs
                      the handler only once that is answered -- once, sequence 1
lost renew ack        a lease renewal's COMMIT applied, its answer lost: the next renewal
                      extends it again, the owner finishes (sequence 1, one effect)
lost finish ack       the terminal COMMIT is applied, its answer lost: the remote writes it
                      again, finds the row already settled with its own token and status, and
                      settles (the journal is the truth: success); pending logs: repair_log
====================  ========================================================================

Every case ends with the oracle over the minute: no journal row lost, nothing run twice.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from scheduler_core.model import Execution
from tests.conftest import TestDatabase
from tests.helpers.fault_cluster import (
    occurrence,
    register,
    repair_pending,
    spawn_fault_node,
    stop_nodes,
    survivor,
    wait_for,
)
from tests.helpers.fault_node import statement_kind
from tests.helpers.journal import enter_minute
from tests.helpers.oracle import TaskSpec, Window, check_database, read_effects, read_events, read_journal
from tests.helpers.tcp_proxy import Statements, TcpProxy

pytestmark = pytest.mark.slow
LEASE_MS = 1500
HANDLER_S = 2.0
REMOTE = "remote"
CASES = [("cut", True), ("delay", False), ("delay", True), ("hang", False), ("lost_claim_ack", False),
         ("lost_claim_ack", True), ("lost_begin_ack", False), ("lost_renew_ack", False), ("lost_finish_ack", False)]
# A lost claim ack is recovered by the remote's own retry on its next tick: a longer lease
# keeps a slow reconnect on a loaded machine from letting the survivor settle it first.
CLAIM_RETRY_LEASE_MS = 5000


def _transaction_with(kind: str) -> Callable[[Statements], bool]:
    """Match the COMMIT of a transaction that ran a statement of ``kind`` (and no claim, unless
    the claim is what we want): see ``statement_kind``."""

    def matches(statements: Statements) -> bool:
        kinds = {statement_kind(s) for s in statements}
        return kind in kinds and (kind == "claim" or "claim" not in kinds)

    return matches


TRAPS = {"lost_claim_ack": "claim", "lost_begin_ack": "begin", "lost_renew_ack": "renew", "lost_finish_ack": "finish"}


def _effect_of(events: Path, node: str) -> bool:
    return any(e["kind"] == "effect" and e["node"] == node for e in read_events(events))


def _refused(events: Path) -> list[dict[str, Any]]:
    return [e for e in read_events(events) if e["kind"] == "write" and e["node"] == REMOTE and e["rowcount"] == 0]


def _expected(case: str, idempotent: bool, first: Execution) -> None:
    """What the rules say the occurrence became."""
    tried = [(a.node_id, a.sequence, a.status) for a in first.attempts]
    if case in ("cut", "lost_finish_ack", "lost_claim_ack", "lost_begin_ack", "lost_renew_ack"):
        assert (first.status, first.sequence, first.owner_node) == ("success", 1, REMOTE)
        assert tried == [(REMOTE, 1, "success")]
    elif case in ("delay", "hang") and idempotent:
        assert (first.status, first.sequence, tried) == ("success", 2, [(REMOTE, 1, "unknown"),
                                                                        ("survivor", 2, "success")])
    elif case in ("delay", "hang"):
        assert (first.status, first.reason, tried) == ("unknown", "lease_expired", [(REMOTE, 1, "unknown")])


def test_a_takeover_whose_answer_was_lost_is_read_back_and_run(server_database: TestDatabase, server_engine: Engine,
                                                              events: Path) -> None:
    """The owner of an idempotent run dies (SIGKILL in its handler); the remote takes it over, and
    the answer to its takeover's COMMIT is lost. The remote reads the row back on its next tick,
    finds its own token, and runs the second attempt at once -- not a lease later, after the row
    it owns without knowing expired again (sequence 2, not 3)."""
    engine = server_engine
    task = TaskSpec("victim", "* * * * *", idempotent=True)
    register(engine, [task])
    minute = enter_minute(engine, seconds_into=5)
    doomed = spawn_fault_node(server_database.url, "doomed", events, {"lease_ms": LEASE_MS},
                              env={"HAI_FAULT_KILL_AT": "in_handler", "HAI_FAULT_TASK": task.id}, clock=engine)
    proxy = TcpProxy.for_url(server_database.url)
    remote = None
    try:
        wait_for(lambda: doomed.poll() is not None, "the owner to be killed in its handler", allow_exit=True)
        sprung = proxy.drop_reply_to_next_commit(_transaction_with("takeover"))
        remote = spawn_fault_node(proxy.url(server_database.url), REMOTE, events,
                                  {"lease_ms": CLAIM_RETRY_LEASE_MS, "trace": True, "connect_timeout_ms": 2000},
                                  clock=engine)
        wait_for(sprung.is_set, "the takeover trap to spring", [remote])
        first = wait_for(lambda: (found := occurrence(engine, task.id, minute)) is not None
                         and found.status != "running" and found, "the occurrence to settle", [remote])
        tried = [(a.node_id, a.sequence, a.status) for a in first.attempts]
        assert (first.status, first.sequence, first.owner_node) == ("success", 2, REMOTE), tried
        assert tried == [("doomed", 1, "unknown"), (REMOTE, 2, "success")]
        stop_nodes([remote])
        assert check_database(engine, Window(minute, minute), [task], read_effects(events)) == []
    finally:
        proxy.close()
        stop_nodes([p for p in (remote, doomed) if p is not None])


@pytest.mark.parametrize(("case", "idempotent"), CASES, ids=[f"{c}-{'idempotent' if i else 'plain'}" for c, i in CASES])
def test_database_link_faults(case: str, idempotent: bool, server_database: TestDatabase, server_engine: Engine,
                              events: Path) -> None:
    engine = server_engine
    task = TaskSpec("victim", "* * * * *", idempotent=idempotent)
    register(engine, [task])
    minute = enter_minute(engine, seconds_into=5)
    lease_ms = CLAIM_RETRY_LEASE_MS if case in ("lost_claim_ack", "lost_renew_ack") else LEASE_MS
    proxy = TcpProxy.for_url(server_database.url)
    sprung = proxy.drop_reply_to_next_commit(_transaction_with(TRAPS[case])) if case in TRAPS else None
    remote = spawn_fault_node(proxy.url(server_database.url), REMOTE, events,
                              {"lease_ms": lease_ms, "sleep_s": {task.id: HANDLER_S}, "trace": True,
                               "connect_timeout_ms": 2000}, clock=engine)
    node = None
    try:
        if sprung is not None:
            wait_for(sprung.is_set, f"the {case} trap to spring", [remote])
        else:
            wait_for(lambda: _effect_of(events, REMOTE), "the remote's handler to start", [remote])
            {"cut": proxy.cut, "delay": lambda: proxy.delay(3 * LEASE_MS / 1000), "hang": proxy.hang}[case]()
        node = survivor(engine, events, lease_ms=lease_ms)
        first = _settle(case, engine, task, minute, remote, events)
        _expected(case, idempotent, first)
        settled = read_journal(engine)
        if case == "hang":
            proxy.cut()  # the held statements never arrive
            proxy.release()
        stop_nodes([remote])
        if case in ("delay", "hang"):  # the remote published nothing after it lost the lease
            final = read_journal(engine)
            assert (final.executions, final.slots, final.logs) == (settled.executions, settled.slots, settled.logs)
        if case == "lost_finish_ack":
            assert first.log_persistence in ("pending", "persisted")  # persisted: logs were in the same COMMIT
        if case in ("lost_begin_ack", "lost_finish_ack"):  # written again once the database answered
            counts = [e["rowcount"] for e in read_events(events)
                      if e["kind"] == "write" and e["node"] == REMOTE and e["what"] == TRAPS[case]]
            assert len(counts) >= 2, f"the {TRAPS[case]} whose answer was lost was not written again: {counts}"
            if case == "lost_finish_ack":
                assert counts[-1] == 0, counts  # the first had landed: written again, it changed nothing
        window = Window(minute, minute)
        effects = read_effects(events)
        assert check_database(engine, window, [task], effects) == []
        repair_pending(node)
        assert check_database(engine, window, [task], effects, projected=True) == []
    finally:
        if node is not None:
            node.close()
        proxy.close()
        stop_nodes([remote])


def _settle(case: str, engine: Engine, task: TaskSpec, minute: int, remote: subprocess.Popen[str],
            events: Path) -> Execution:
    """Wait until the occurrence is settled (and, after a delay, until the remote was refused)."""

    def done() -> Execution | None:
        found = occurrence(engine, task.id, minute)
        ready = found is not None and found.status != "running" and found.log_persistence != "pending"
        if case == "lost_finish_ack":  # nobody projects what the lost COMMIT left pending
            ready = found is not None and found.status != "running"
        return found if ready else None

    first: Execution = wait_for(done, f"the occurrence to settle after {case}", [remote], timeout=60)
    if case == "delay":
        wait_for(lambda: _refused(events), "the remote's late statements to be refused", [remote])
    return first
