"""Node heartbeats (for the dashboard; liveness never decides ownership, leases do)."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Connection, Engine, Row

from scheduler_core.db.clock import db_now_ms, db_statement_now_ms, optional_ms, to_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import nodes
from scheduler_core.store.dialect import insert_ignore
from scheduler_core.store.transactions import read, write


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    host: str
    pid: int
    started_at: int
    last_seen_at: int
    stopped_at: int | None
    capabilities: tuple[str, ...] = ()  # handler kinds it runs (advertised with each heartbeat)
    groups: tuple[str, ...] = ()  # node groups it serves
    clock_jump_ms: int | None = None  # the last jump of the database clock it saw (+: ahead), runtime/clock_watch.py
    clock_jump_at: int | None = None  # DB-clock ms when it saw it

    def alive(self, now_ms: int, within_ms: int) -> bool:
        return self.stopped_at is None and self.last_seen_at >= now_ms - within_ms

    def can_run(self, kind: str, group: str | None) -> bool:
        return kind in self.capabilities and (group is None or group in self.groups)


def _node(r: Row[Any]) -> NodeInfo:
    return NodeInfo(r.node_id, r.host, int(r.pid), to_ms(r.started_at, "started_at"),
                    to_ms(r.last_seen_at, "last_seen_at"), optional_ms(r.stopped_at, "stopped_at"),
                    tuple(r.capabilities or ()), tuple(r.node_groups or ()),
                    None if r.clock_jump_ms is None else int(r.clock_jump_ms),  # signed: a jump back is < 0
                    optional_ms(r.clock_jump_at, "clock_jump_at"))


class NodeRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def heartbeat(self, node_id: str, host: str, pid: int, returning: Sequence[Any] = (),
                  capabilities: Sequence[str] = (), groups: Sequence[str] = (),
                  last_tick_ms: int | None = None) -> Row[Any] | None:
        """Create the node row on first call; afterwards refresh ``last_seen_at`` and what the node
        advertises (the handler kinds it runs and the groups it serves), and ``last_tick_ms`` (its
        previous tick's duration, for ``/metrics``).

        ``returning``: SQL expressions to evaluate in the same transaction and return (the
        node's tick snapshot), carried by the UPDATE's RETURNING where the database has it, so
        a heartbeat tick costs no more statements than any other tick.
        """

        def work(conn: Connection) -> Row[Any] | None:
            advertised = {"capabilities": sorted(capabilities), "node_groups": sorted(groups),
                          "last_tick_ms": last_tick_ms}
            beat = update(nodes).where(nodes.c.node_id == node_id).values(last_seen_at=db_now_ms(), stopped_at=None,
                                                                          **advertised)
            carried = bool(returning) and dialect_kind(conn) != "mysql"
            result = conn.execute(beat.returning(*returning) if carried else beat)
            row = result.first() if carried else None
            if (row is None if carried else result.rowcount == 0):
                now = db_statement_now_ms()  # one reading: started_at = last_seen_at
                conn.execute(insert_ignore(conn, nodes, [{"node_id": node_id, "host": host, "pid": pid,
                                                          "started_at": now, "last_seen_at": now,
                                                          "stopped_at": None, **advertised}]))
            if returning and row is None:
                row = conn.execute(select(*returning)).one()
            return row

        return write(self.engine, work)

    def record_clock_jump(self, node_id: str, jump_ms: int) -> None:
        """Journal that this node saw the database clock jump ``jump_ms`` (now, on that clock)."""
        write(self.engine, lambda conn: conn.execute(
            update(nodes).where(nodes.c.node_id == node_id).values(clock_jump_ms=jump_ms, clock_jump_at=db_now_ms())))

    def mark_stopped(self, node_id: str) -> None:
        write(self.engine, lambda conn: conn.execute(
            update(nodes).where(nodes.c.node_id == node_id).values(stopped_at=db_now_ms())))

    def list(self) -> list[NodeInfo]:
        query = select(nodes).order_by(nodes.c.last_seen_at.desc())
        return [_node(r) for r in read(self.engine, lambda conn: conn.execute(query).all())]

    def alive(self, within_ms: int) -> tuple[int, builtins.list[NodeInfo]]:
        """The DB time now and the nodes not stopped whose heartbeat is at most ``within_ms`` old."""

        def work(conn: Connection) -> tuple[int, builtins.list[NodeInfo]]:
            now = to_ms(conn.execute(select(db_now_ms())).scalar_one(), "db_now_ms")
            rows = conn.execute(select(nodes).where(nodes.c.stopped_at.is_(None),
                                                    nodes.c.last_seen_at >= now - within_ms)).all()
            return now, [_node(r) for r in rows]

        return read(self.engine, work)
