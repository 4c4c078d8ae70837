"""Monotonic totals behind the ``/metrics`` counters (table ``metric_totals``, migration 0013).

A writer gathers what its transaction changes in a ``Tally`` and calls ``Tally.write(conn)``
inside that same transaction: a rolled-back transition counts nothing, a committed one counts
once, with ONE upsert statement for the whole tally. Rows are per task (deliveries: per
provider) and per ``team``, the team its task is in when counted (read by the upsert; "" for
deliveries, lock rows, a task gone), never one global row every node would queue on; none is deleted.

What is counted, by ``metric`` (``scope``, ``label``):

- ``executions`` (task, status): each transition into a terminal status or ``unknown`` (a verdict counts again);
- ``takeovers`` (task, ""): each takeover of an expired lease (a new ownership generation);
- ``missed`` (task, ""): missed cron minutes (a summary row counts the minutes it stands for);
- ``deliveries`` (provider, outcome): each notification that ended sent, dead or unknown, and
  each verdict on an unknown one (sent, discarded);
- ``lateness`` (task, bucket): cron occurrences by fire lateness (first owner's first attempt's
  start minus the minute) in the first ``LATENESS_BUCKETS_MS`` bucket that holds it (``+Inf``
  beyond); label ``sum`` adds the ms. Counted when the first ownership ends (terminal commit,
  takeover, expiry to ``unknown``: ``journal.rows.first_lateness``), not on the begin's path;
- ``task`` (task, ""): a lock row only (``lock_tasks``); the series are ordered by each task's oldest row.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    Text,
    bindparam,
    case,
    cast,
    column,
    func,
    literal,
    literal_column,
    or_,
    select,
    text,
)
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Connection
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.elements import ColumnElement

from scheduler_core.access import EVERY_TEAM, Scope
from scheduler_core.db.clock import db_statement_now_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import metric_totals, nopad_collation, tasks

EXECUTIONS = "executions"
TAKEOVERS = "takeovers"
MISSED = "missed"
DELIVERIES = "deliveries"
LATENESS = "lateness"
TASK = "task"
NO_TEAM = (DELIVERIES, TASK)  # counted with team ""
LATENESS_BUCKETS_MS = (100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000)
LATENESS_SUM = "sum"
INF = "+Inf"
ENDED_DELIVERIES = frozenset({"sent", "dead", "unknown", "discarded"})

Key = tuple[str, str, str]  # (metric, scope, label)


def lateness_bucket(late_ms: int) -> str:
    """The label of the first bucket whose upper bound holds ``late_ms`` (``+Inf`` beyond the last)."""
    return next((str(bound) for bound in LATENESS_BUCKETS_MS if late_ms <= bound), INF)


class Tally:
    """The increments of one transaction, written by ``write`` as one statement."""

    def __init__(self) -> None:
        self.counts: Counter[Key] = Counter()

    def __bool__(self) -> bool:
        return bool(self.counts)

    def _task(self, metric: str, task_id: str, label: str, n: int) -> Tally:
        """Count ``n`` under ``metric`` for the task. Nothing else is written for it: a row every
        count of a task touched would be locked by an owner frozen inside its terminal commit,
        and the next claim batch that skips one of that task's minutes would wait on it with
        every other task of the batch (tests/faults/test_pause.py)."""
        if n > 0:
            self.counts[(metric, task_id, label)] += n
        return self

    def execution(self, task_id: str, status: str, n: int = 1) -> Tally:
        return self._task(EXECUTIONS, task_id, str(status), n)

    def executions(self, pairs: Iterable[tuple[str, str]]) -> Tally:
        """One ``execution`` per (task, status) pair."""
        for task_id, status in pairs:
            self.execution(task_id, status)
        return self

    def takeover(self, task_id: str) -> Tally:
        return self._task(TAKEOVERS, task_id, "", 1)

    def missed(self, task_id: str, minutes: int) -> Tally:
        return self._task(MISSED, task_id, "", minutes)

    def lateness(self, task_id: str, late_ms: int) -> Tally:
        """One cron occurrence's fire lateness; a negative one (a start read before the minute's
        boundary) counts as 0, so that the histogram's sum only grows."""
        late_ms = max(0, late_ms)
        self._task(LATENESS, task_id, lateness_bucket(late_ms), 1)
        if late_ms:
            self.counts[(LATENESS, task_id, LATENESS_SUM)] += late_ms
        return self

    def delivery(self, provider: str, outcome: str) -> Tally:
        if outcome in ENDED_DELIVERIES:
            self.counts[(DELIVERIES, provider, str(outcome))] += 1
        return self

    def write(self, conn: Connection) -> None:
        """Add the tally to ``metric_totals`` in ``conn``'s transaction: one upsert statement (none
        when empty), ``value = value + n``, its rows in key order so that concurrent writers lock
        them alike (no InnoDB deadlock between two batches). New rows take ``created_at`` = the
        statement's DB time; existing rows change ``value`` only."""
        if not self.counts:
            return
        _add(conn, sorted(self.counts.items()))


def _add(conn: Connection, ordered: Sequence[tuple[Key, int]]) -> None:
    """Add each value to its row (made if missing), the rows in the given order: one statement."""
    kind = dialect_kind(conn)
    if kind == "postgresql":
        conn.execute(_PG_UPSERT, {"rows": json.dumps([[m, s, lb, n] for (m, s, lb), n in ordered])})
    elif kind == "sqlite":
        conn.execute(_SQLITE_UPSERT, [{"metric": m, "scope": s, "label": lb, "value": n, "row_metric": m,
                                       "row_scope": s} for (m, s, lb), n in ordered])
    else:
        conn.execute(_mysql_upsert_for(conn), {"rows": json.dumps([[m, s, lb, n] for (m, s, lb), n in ordered])})


# On PostgreSQL and SQLite the upsert's SQL does not depend on the tally, so the engine compiles
# it once: a multi-row VALUES list is compiled again for every tally (its parameters named by row),
# and on PostgreSQL that was half of a node's busy time in a burst, when each begin batch still
# counted its lateness per task (bench/PROFILE.md, sixth round). PostgreSQL: the rows as one JSON document
# (store/dialect.py), inserted in their order (key order: concurrent writers lock the rows alike).
# SQLite: the one-row statement executed for each row, in order (a loop in C). MySQL / MariaDB:
# the JSON document through ``JSON_TABLE`` (MariaDB 10.6+, MySQL 8.0.4+), in its order; an
# executemany would not do, as PyMySQL sends it as one INSERT only when every value is a parameter
# and ``created_at`` is the database's time.
def _team_of(metric: ColumnElement[Any], scope: ColumnElement[Any]) -> ColumnElement[Any]:
    """The team a count is made under: its task's now; "" for deliveries and lock rows, and for a
    task that is gone. A plain read (READ COMMITTED on PostgreSQL and MySQL): no lock is taken on
    the task's row, so a frozen owner's commit never holds up a change to its task."""
    owner = select(tasks.c.team).where(tasks.c.id == scope).scalar_subquery()
    nobody = literal("", tasks.c.team.type)
    untied = or_(*(metric == literal(name, Text()) for name in NO_TEAM))  # not IN: SQLite's executemany
    return case((untied, nobody), else_=func.coalesce(owner, nobody))


def _pg_upsert() -> Insert:
    elements = func.jsonb_array_elements(cast(bindparam("rows", type_=Text()), JSONB)).table_valued(
        "value", with_ordinality="n").render_derived(name="tally")
    row = elements.c.value

    def field(i: int, type_: Any) -> ColumnElement[Any]:
        return cast(row.op("->>")(literal_column(str(i))), type_)

    rows = select(field(0, Text()), field(1, Text()), field(2, Text()), _team_of(field(0, Text()), field(1, Text())),
                  field(3, BigInteger()), db_statement_now_ms()).select_from(elements).order_by(elements.c.n)
    pg = postgresql.insert(metric_totals).from_select(["metric", "scope", "label", "team", "value", "created_at"],
                                                      rows)
    return pg.on_conflict_do_update(index_elements=list(metric_totals.primary_key.columns),
                                    set_={"value": metric_totals.c.value + pg.excluded.value})


def _mysql_upsert(collation: str) -> Insert:
    """The JSON rows' text in the tables' collation (``nopad_collation``): the task's team is found
    by comparing the row's task id with ``tasks.id``."""
    width = {c.name: c.type.length for c in metric_totals.primary_key.columns}  # type: ignore[attr-defined]
    text_of = f"CHARACTER SET utf8mb4 COLLATE {collation}"
    tally = text(
        "SELECT n, metric, scope, label, value FROM JSON_TABLE(:rows, '$[*]' COLUMNS ("
        "n FOR ORDINALITY, "
        f"metric VARCHAR({width['metric']}) {text_of} PATH '$[0]' ERROR ON EMPTY, "
        f"scope VARCHAR({width['scope']}) {text_of} PATH '$[1]' ERROR ON EMPTY, "
        f"label VARCHAR({width['label']}) {text_of} PATH '$[2]' ERROR ON EMPTY, "
        "value BIGINT PATH '$[3]' ERROR ON EMPTY)) AS rows_in"
    ).columns(column("n", Integer()), column("metric", Text()), column("scope", Text()), column("label", Text()),
              column("value", BigInteger())).subquery("tally")
    t = tally.c
    rows = select(t.metric, t.scope, t.label, _team_of(t.metric, t.scope), t.value, db_statement_now_ms()
                  ).order_by(t.n)
    my = mysql.insert(metric_totals).from_select(["metric", "scope", "label", "team", "value", "created_at"], rows)
    return my.on_duplicate_key_update(value=metric_totals.c.value + my.inserted.value)


def _sqlite_upsert() -> Insert:
    lite = sqlite.insert(metric_totals).values(created_at=db_statement_now_ms(), team=_team_of(
        bindparam("row_metric", type_=Text()), bindparam("row_scope", type_=Text())))
    return lite.on_conflict_do_update(index_elements=list(metric_totals.primary_key.columns),
                                      set_={"value": metric_totals.c.value + lite.excluded.value})


_PG_UPSERT, _SQLITE_UPSERT = _pg_upsert(), _sqlite_upsert()
_MYSQL_UPSERTS: dict[str, Insert] = {}  # by the server's collation


def _mysql_upsert_for(conn: Connection) -> Insert:
    collation = nopad_collation(conn.dialect)
    if collation not in _MYSQL_UPSERTS:
        _MYSQL_UPSERTS[collation] = _mysql_upsert(collation)
    return _MYSQL_UPSERTS[collation]


def read_series(conn: Connection, max_task_series: int, other: str,
                scope: Scope = EVERY_TEAM) -> list[tuple[str, str, str, str, int]]:
    """Every counter series: (metric, scope, label, team, value), summed in SQL (two statements).

    A task keeps its own scope when it is among the first ``max_task_series`` tasks counted, by
    the ``created_at`` of its oldest row (then id): rows are never deleted and ``created_at``
    never changes, so a task's place only moves when a row older than another task's first one
    commits after it (the same milliseconds, at the 100th task). The other tasks are summed under
    ``other``, one series per team. ``team`` is the team each count was made in, so no series
    ever moves between teams. Deliveries keep their provider, with team "". ``task`` rows are
    not series. A team's ``scope`` reads its teams' rows only (no deliveries: they are counted by
    provider, not by team); the places are every team's, so a team's series are exactly those of
    a global scrape with its teams.
    """
    t = metric_totals.c
    first = func.min(t.created_at)
    kept = list(conn.execute(select(t.scope).where(t.metric.not_in(NO_TEAM)).group_by(t.scope)
                             .order_by(first, t.scope).limit(max_task_series)).scalars())
    seen = [] if scope.teams is None else [t.team.in_(sorted(scope.teams))]  # a delivery's team is "": none
    mapped = select(t.metric, case((or_(t.metric == DELIVERIES, t.scope.in_(kept)), t.scope),
                                   else_=literal(other, t.scope.type)).label("series"), t.label, t.team, t.value
                    ).where(t.metric != TASK, *seen).subquery()
    m = mapped.c
    rows = conn.execute(select(m.metric, m.series, m.label, m.team, func.sum(m.value))
                        .group_by(m.metric, m.series, m.label, m.team))
    return [(str(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4])) for r in rows]


def lock_tasks(conn: Connection, task_ids: Iterable[str]) -> None:
    """Lock the ``task`` rows of ``task_ids`` until this transaction ends (made if missing, their
    values unchanged): writers that must not count the same thing twice queue here, in key order."""
    ordered = [((TASK, t, ""), 0) for t in sorted(set(task_ids))]
    if ordered:
        _add(conn, ordered)
