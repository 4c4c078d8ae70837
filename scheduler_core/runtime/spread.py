"""Which of a minute's due occurrences a node claims first.

Every node plans the same minute and claims from the same list. Claimed in a random order,
two nodes' batches overlap, and the second claimer's insert waits for the first's uncommitted
rows (an insert-or-ignore meeting a key another transaction is inserting waits for its
commit): at the boundary, with 1,000 tasks due, a node's first claim waited about 70 ms for
the other's, while no handler ran on either. So each node claims ITS share first -- the
occurrences whose hash falls to it among the live nodes able to run the task -- and only then
the rest, in a random order, which is how a node that finished its share helps with another's
(or takes over the share of a node that stopped beating). Another's share is claimed only for
threads that are idle, never for the prefetch (``Node._claim_backlog``): a node that claimed its
own share ahead of its threads leaves the rest to the node whose share it is, instead of holding
it where it waits for a thread. The order never decides who runs an occurrence: the claim does
(one journal row per occurrence id, whoever inserts it first).

The live nodes are read at most once per heartbeat interval, after a tick's claims (never in
front of them), and only by ticks that had something due: an idle tick stays one statement.
Until a first reading, or when this node is not among the nodes it read, every occurrence is
its share (the random order of before).
"""

from __future__ import annotations

import logging
import random
import time
import zlib
from collections.abc import Callable, Sequence

from scheduler_core.runtime.clock_skew import SkewWatch
from scheduler_core.runtime.planner import DueOccurrence
from scheduler_core.store import NodeRepository
from scheduler_core.store.nodes import NodeInfo

logger = logging.getLogger("scheduler_core.node")
Capability = tuple[str, str | None]  # (handler kind, node group)


def share_of(task_id: str, minute_ms: int, capable: Sequence[str]) -> str:
    """The node (of ``capable``, sorted ids) whose share the occurrence is: the same answer on
    every node that read the same live nodes."""
    return capable[zlib.crc32(f"{task_id}\0{minute_ms}".encode()) % len(capable)]


class Spread:
    def __init__(self, node_id: str, nodes: NodeRepository, alive_within_ms: int, every_s: float,
                 skew: SkewWatch | None = None) -> None:
        self._node_id = node_id
        self._skew = skew  # Galera: the nodes read here also tell whose database clock is ahead
        self._nodes = nodes
        self._alive_within_ms = alive_within_ms
        self._every_s = every_s
        self._alive: list[NodeInfo] = []
        self._read_at: float | None = None
        self._capable: dict[Capability, list[str]] = {}

    def order(self, due: list[DueOccurrence],
              capability: Callable[[str], Capability]) -> tuple[list[DueOccurrence], list[DueOccurrence]]:
        """``due`` split into this node's share and the others', each in a random order."""
        mine: list[DueOccurrence] = []
        others: list[DueOccurrence] = []
        for occurrence in due:
            (mine if self._is_mine(occurrence, capability(occurrence.task_id)) else others).append(occurrence)
        random.shuffle(mine)
        random.shuffle(others)
        return mine, others

    def _is_mine(self, occurrence: DueOccurrence, needs: Capability) -> bool:
        capable = self._capable.get(needs)
        if capable is None:
            capable = self._capable[needs] = sorted(n.node_id for n in self._alive if n.can_run(*needs))
        if self._node_id not in capable:
            return True
        return share_of(occurrence.task_id, occurrence.minute_ms, capable) == self._node_id

    def refresh_if_stale(self) -> None:
        """Read the live nodes again when the last reading is a heartbeat interval old."""
        if self._read_at is not None and time.monotonic() - self._read_at < self._every_s:
            return
        self._read_at = time.monotonic()  # a failed read is not retried before the next interval
        try:
            now_ms, alive = self._nodes.alive(self._alive_within_ms)
        except Exception:
            logger.warning("could not read the live nodes (claim order stays as it was)", exc_info=True)
            return
        if self._skew is not None:
            self._skew.observe(now_ms, alive)
        self._alive, self._capable = alive, {}
