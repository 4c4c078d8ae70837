"""Galera: the database clocks of the nodes the scheduler nodes write through must agree.

Each Galera node has its own clock, and a lease written through one node (its expiry on that
node's clock) is judged through another. A node whose clock is ahead by S sees others' leases
end S early and their minutes begin S early. Up to the tolerance (``jump_tolerance_ms``: lease/6,
250 ms .. 2 s, the same bound as a clock jump at a failover) that costs no lease: renewals leave
two thirds of a lease. A heartbeat carries its writer's database clock and replication only makes
it look older, so a heartbeat from this node's future is the other's clock ahead by at least that
much: whichever node is behind sees it, though only once it is larger than the heartbeat's age.

So a node about to start measures (:meth:`SkewWatch.measure`): it reads the live nodes every
200 ms for up to a heartbeat interval and a half, and each heartbeat it sees change was written
between its previous reading and this one (its reads are causal on Galera: a commit made before
a read began is in it). That brackets each other node's clock against its own within a reading's
interval, ahead or behind, and a difference beyond the tolerance refuses the start
(ClockSkewError). While running, a heartbeat from the future is logged once per episode (and
when the clocks agree again).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from scheduler_core.db.galera import clock_ahead
from scheduler_core.errors import ClockSkewError
from scheduler_core.store.nodes import NodeInfo

logger = logging.getLogger("scheduler_core.node")


class SkewWatch:
    def __init__(self, node_id: str, tolerance_ms: int) -> None:
        self.node_id = node_id
        self.tolerance_ms = tolerance_ms
        self.ahead: tuple[str, int] | None = None  # the last reading beyond the tolerance

    def beyond(self, now_ms: int, nodes: Iterable[NodeInfo]) -> tuple[str, int] | None:
        """The other node whose heartbeat is furthest ahead of ``now_ms``, when by more than the tolerance."""
        found = clock_ahead(now_ms, [(n.node_id, n.last_seen_at) for n in nodes
                                     if n.node_id != self.node_id and n.stopped_at is None])
        return found if found is not None and found[1] > self.tolerance_ms else None

    def measure(self, read: Callable[[], tuple[int, list[NodeInfo]]], within_s: float,
                every_s: float = 0.2) -> dict[str, tuple[int, int]]:
        """Each other live node's database clock minus this one's, as (at least, at most) ms, for
        the nodes whose heartbeat changed within ``within_s`` (``read``: the DB clock and the
        live nodes, in one statement)."""
        before_ms, nodes = read()
        last = {n.node_id: n.last_seen_at for n in nodes if n.node_id != self.node_id and n.stopped_at is None}
        found: dict[str, tuple[int, int]] = {}
        deadline = time.monotonic() + within_s
        while len(found) < len(last) and time.monotonic() < deadline:
            time.sleep(every_s)
            now_ms, nodes = read()
            for n in nodes:
                if n.node_id in last and n.node_id not in found and n.last_seen_at != last[n.node_id]:
                    found[n.node_id] = (n.last_seen_at - now_ms, n.last_seen_at - before_ms)
            before_ms = now_ms
        return found

    def refuse(self, measured: dict[str, tuple[int, int]]) -> None:
        """Before starting: raise ClockSkewError when another node's database clock is surely
        more than the tolerance ahead of this one's, or behind it."""
        for node_id, (at_least, at_most) in sorted(measured.items()):
            if at_least > self.tolerance_ms or at_most < -self.tolerance_ms:
                raise ClockSkewError(self._text(node_id, at_least, at_most) + "; this node does not start until "
                                     "the clocks agree (synchronise the database servers' clocks with NTP)")

    def observe(self, now_ms: int, nodes: Iterable[NodeInfo]) -> None:
        """While running: say so once when the clocks disagree, and once when they agree again."""
        found = self.beyond(now_ms, nodes)
        if found is not None and self.ahead is None:
            logger.warning("%s: %s", ClockSkewError.code, self._text(found[0], found[1], None))
        elif found is None and self.ahead is not None:
            logger.warning("the database clocks agree again (node %s is no longer ahead)", self.ahead[0])
        self.ahead = found

    def _text(self, node_id: str, at_least: int, at_most: int | None) -> str:
        by = f"at least {at_least} ms ahead of" if at_least > 0 else f"at least {-(at_most or 0)} ms behind"
        return (f"node {node_id} writes through a database whose clock is {by} this node's (tolerated: "
                f"{self.tolerance_ms} ms; leases and minute boundaries are read on each database's own clock)")
