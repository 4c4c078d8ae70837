"""The claim order at a minute boundary (runtime/spread.py): each node claims its own share of
the due occurrences first, the shares of nodes that read the same live nodes are disjoint and
cover the minute, and a node that knows no peers (or is not among them) takes the plain random
order of before."""

from __future__ import annotations

from collections import Counter
from typing import Any

from scheduler_core.runtime.planner import DueOccurrence
from scheduler_core.runtime.spread import Spread, share_of
from scheduler_core.store.nodes import NodeInfo

MINUTE = 1_796_146_860_000


def _node(node_id: str, kinds: tuple[str, ...] = ("api", "python", "hook"), groups: tuple[str, ...] = ()) -> NodeInfo:
    return NodeInfo(node_id, "host", 1, 0, 0, None, kinds, groups)


class _Nodes:
    def __init__(self, alive: list[NodeInfo]) -> None:
        self.alive_nodes = alive
        self.reads = 0

    def alive(self, within_ms: int) -> tuple[int, list[NodeInfo]]:
        self.reads += 1
        return MINUTE, self.alive_nodes


def _due(count: int) -> list[DueOccurrence]:
    return [DueOccurrence(f"task-{i:04d}", MINUTE, 1) for i in range(count)]


def _spread(node_id: str, nodes: _Nodes) -> Spread:
    spread = Spread(node_id, nodes, 30_000, 10.0)  # type: ignore[arg-type]
    spread.refresh_if_stale()
    return spread


def _hook(_task_id: str) -> tuple[str, Any]:
    return ("hook", None)


def test_each_node_claims_its_own_share_first_and_the_shares_split_the_minute() -> None:
    nodes = _Nodes([_node("b"), _node("a"), _node("c")])
    due = _due(600)
    firsts = {}
    for node_id in ("a", "b", "c"):
        share, others = _spread(node_id, nodes).order(list(due), _hook)
        assert sorted(share + others, key=lambda d: d.task_id) == due  # a split: nothing lost or added
        mine = [d for d in due if share_of(d.task_id, d.minute_ms, ["a", "b", "c"]) == node_id]
        assert sorted(share, key=lambda d: d.task_id) == mine  # its share, the rest the others'
        firsts[node_id] = {d.task_id for d in share}
    assert set.union(*firsts.values()) == {d.task_id for d in due}
    assert sum(len(s) for s in firsts.values()) == len(due)  # disjoint
    assert min(len(s) for s in firsts.values()) > 150  # and about even (600 / 3 each)


def test_only_nodes_able_to_run_a_task_share_it() -> None:
    nodes = _Nodes([_node("web-1", ("api", "python")), _node("app", ("api", "python", "hook")),
                    _node("web-2", ("api", "python"))])
    due = _due(100)
    app, others = _spread("app", nodes).order(list(due), _hook)
    assert len(app) == 100 and not others  # every hook occurrence is the hook node's share; none waits for a web worker
    assert all(share_of(d.task_id, d.minute_ms, ["app"]) == "app" for d in app)
    # api tasks: every node is able, so the minute is split three ways and web-1 starts with its third
    shares = Counter(share_of(d.task_id, d.minute_ms, ["app", "web-1", "web-2"]) for d in due)
    assert set(shares) == {"app", "web-1", "web-2"}
    first, rest = _spread("web-1", nodes).order(list(due), lambda _: ("api", None))
    assert len(first) == shares["web-1"] and len(rest) == 100 - len(first)
    assert all(share_of(d.task_id, d.minute_ms, ["app", "web-1", "web-2"]) == "web-1" for d in first)


def test_without_peers_every_occurrence_is_its_share_and_reads_wait_a_heartbeat() -> None:
    lonely = Spread("a", _Nodes([]), 30_000, 10.0)  # type: ignore[arg-type]
    assert len(lonely.order(_due(50), _hook)[0]) == 50  # never read: everything is its share
    nodes = _Nodes([_node("b"), _node("c")])  # "a" has not beaten yet
    spread = _spread("a", nodes)
    assert len(spread.order(_due(50), _hook)[0]) == 50
    spread.refresh_if_stale()
    spread.refresh_if_stale()
    assert nodes.reads == 1  # at most one read per heartbeat interval
