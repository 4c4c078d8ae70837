"""Another node's share of a minute is claimed for idle threads only (runtime/spread.py).

A node claims its own share first, and the rest only for threads it has idle: never for its
prefetch, where another node's occurrences would wait behind its own for a thread while that
node could start them. A share whose node does not come is still run, as threads free up."""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.cron import cron_occurrence_id
from scheduler_core.runtime.spread import share_of
from scheduler_core.statuses import Trigger
from scheduler_core.store import ClaimOutcome, ClaimRequest, NodeRepository
from scheduler_core.store.executions import ExecutionRepository
from scheduler_core.testing import set_clock_offset
from tests.helpers.node_cluster import cron_at, journal, next_boundary


def _start_beside_a_peer(engine: Engine, node: Any, ids: list[str], boundary: int) -> None:
    """Register ``ids`` due at ``boundary``, beat for an alive "peer" that never claims, start the
    node ("here") and have it read the live nodes now (not a heartbeat after the first busy tick)."""
    for task_id in ids:
        node.register(TaskDefinition(id=task_id, name=task_id, cron=cron_at(boundary)))
    NodeRepository(engine).heartbeat("peer", "host-peer", 1, capabilities=["hook"])
    node.start()
    deadline = time.monotonic() + 10
    while not [n for n in NodeRepository(engine).alive(60_000)[1] if n.node_id == "here"]:
        assert time.monotonic() < deadline, "the node never beat"
        time.sleep(0.05)
    assert node._node is not None
    spread = node._node._spread
    spread._read_at = None
    spread.refresh_if_stale()


def test_another_nodes_share_waits_for_an_idle_thread_not_for_the_prefetch(engine: Engine, make_node: Any) -> None:
    offset, boundary = next_boundary(engine, lead_ms=3_000)
    set_clock_offset(engine, offset)
    release, started = threading.Event(), threading.Event()

    def execute(event: Any) -> None:
        started.set()
        release.wait(20)

    node = make_node(hooks={"on_task_execute": execute}, node_id="here", max_concurrency=1, max_queued=50)
    ids = [f"share-{i:02d}" for i in range(12)]
    _start_beside_a_peer(engine, node, ids, boundary)
    mine = {t for t in ids if share_of(t, boundary, ["here", "peer"]) == "here"}
    assert 0 < len(mine) < len(ids)
    try:
        assert started.wait(15), "no handler started"
        time.sleep(0.5)  # several ticks: a prefetch would have claimed the peer's share by now
        claimed = {row.task_id for row in journal(engine, scheduled_minute=boundary)}
        assert claimed == mine, f"claimed {sorted(claimed - mine)} of the peer's share for the prefetch"
    finally:
        release.set()
    deadline = time.monotonic() + 30
    while len([r for r in journal(engine, scheduled_minute=boundary) if r.status == "success"]) < len(ids):
        assert time.monotonic() < deadline, "the peer's share was not run by the node that was there"
        time.sleep(0.1)


def test_another_nodes_share_it_claimed_first_costs_one_read_not_a_claim_per_idle_thread(
        engine: Engine, make_node: Any) -> None:
    """The other node claimed its share before this one came to it (the usual case in a busy
    minute): this node drops those occurrences after one read, instead of claiming them a few
    at a time for its idle threads -- each a write transaction finding them taken, beside the
    other node's own claims and begins."""
    offset, boundary = next_boundary(engine, lead_ms=3_000)
    set_clock_offset(engine, offset)
    node = make_node(hooks={"on_task_execute": lambda event: None}, node_id="here", max_concurrency=2)
    ids = [f"taken-{i:02d}" for i in range(30)]
    _start_beside_a_peer(engine, node, ids, boundary)
    theirs = [t for t in ids if share_of(t, boundary, ["here", "peer"]) == "peer"]
    assert 0 < len(theirs) < len(ids)
    # the peer's claims, ahead of the boundary (it is faster than this node at it)
    peer = ExecutionRepository(engine, "peer", 60_000)
    won = peer.claim([ClaimRequest(occurrence_id=cron_occurrence_id(t, boundary), task_id=t, task_revision=1,
                                   trigger=Trigger.CRON, max_attempts=1, token=f"peer-{t}", scheduled_minute=boundary)
                      for t in theirs])
    assert {r.outcome for r in won} == {ClaimOutcome.CLAIMED}
    claims: list[int] = []  # the node's claim transactions, by size
    repository = node._node.ctx.executions
    claim_then = repository.claim_then

    def counted(requests: Any, then: Any) -> Any:
        claims.append(len(requests))
        return claim_then(requests, then)

    repository.claim_then = counted  # type: ignore[method-assign]
    try:
        deadline = time.monotonic() + 20
        while len([r for r in journal(engine, scheduled_minute=boundary) if r.status == "success"]) \
                < len(ids) - len(theirs):
            assert time.monotonic() < deadline, "this node's share did not run"
            time.sleep(0.1)
        time.sleep(0.5)  # idle threads, several ticks
    finally:
        repository.claim_then = claim_then  # type: ignore[method-assign]
    assert sum(claims) == len(ids) - len(theirs), f"claim transactions of {claims} occurrences for the " \
                                               f"{len(ids) - len(theirs)} of its own share (the rest was the peer's)"
    rows = journal(engine, scheduled_minute=boundary)
    assert sorted(r.task_id for r in rows if r.owner_node == "peer") == sorted(theirs)
