"""A node's first busy minute after it started: it knows the live nodes before the boundary, so
it claims its own share first (runtime/spread.py) instead of racing every other node for every
occurrence (a fresh node read them only after its first tick with something due, so in its
first busy minute both nodes claimed all of it, in random orders, and each claim waited on the
other's: bench/PROFILE.md, seventh round)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.runtime.collector import BURST
from scheduler_core.testing import set_clock_offset
from tests.helpers.journal import db_now
from tests.helpers.node_cluster import cron_at, next_boundary


def test_nodes_know_each_other_before_their_first_busy_minute(engine: Engine, make_node: Any) -> None:
    offset, boundary = next_boundary(engine, lead_ms=4_000)
    set_clock_offset(engine, offset)
    first, second = make_node(node_id="first"), make_node(node_id="second")
    for i in range(BURST):
        first.register(TaskDefinition(id=f"busy-{i}", name=f"Busy {i}", cron=cron_at(boundary)))
    first.start()
    second.start()
    deadline = time.monotonic() + 10
    while db_now(engine) < boundary - 300:  # the collector decides within a tick interval of it
        assert time.monotonic() < deadline, "the boundary did not come"
        time.sleep(0.02)
    for node in (first, second):
        spread = node._node._spread
        assert sorted(n.node_id for n in spread._alive) == ["first", "second"], node.config.node_id
