"""A limit on a task's scheduled runs (``max_runs``, docs/semantics.md S10), kept where a
scheduled run is seated: in the claim's transaction, on the task's row.

A cron or catch-up occurrence seated in its task's slot counts one run (``tasks.runs_counted``);
the seat that reaches ``max_runs`` disables the task in the same transaction, marks it
(``tasks.limit_reached_at``), bumps the tasks version and writes the audit line. The run just
seated goes on and ends as its handler says: the marker tells the runner that the task was not
disabled by an operator (runtime/planner.py, ``definition_problem``). An occurrence of a task
whose limit is spent -- a node that has not yet seen the disable, a buffered or catch-up row
waiting -- is journaled ``skipped`` (reason ``max_runs``) and never runs. Manual runs neither
count nor are stopped. Enabling the task again starts a new count (store/tasks.py, ``update``).

The task rows are locked (``FOR UPDATE``, in id order) only for tasks with a limit, so that two
claims never both take the last run; a claim of such a task waits for an edit of it in progress.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import audit_log, tasks
from scheduler_core.statuses import SCHEDULED_TRIGGERS
from scheduler_core.store.dialect import greatest
from scheduler_core.store.journal.rows import ClaimRequest
from scheduler_core.store.tasks import bump_tasks_version

COUNTED = SCHEDULED_TRIGGERS  # the scheduled runs; manual and backfill ones are not counted
SPENT_REASON = "max_runs"  # the reason of an occurrence skipped because the limit is spent
DISABLED_BY = "scheduler"  # the audit line's actor


@dataclass(frozen=True)
class RunLimit:
    max_runs: int
    counted: int  # scheduled runs seated since the task was created or enabled again
    reached: bool  # it disabled itself on reaching the limit (and was not enabled since)

    @property
    def spent(self) -> bool:
        return self.reached or self.counted >= self.max_runs


def limited(requests: Sequence[ClaimRequest]) -> list[str]:
    """The tasks of ``requests`` whose runs may count (scheduled triggers), sorted."""
    return sorted({r.task_id for r in requests if r.trigger in COUNTED})


def lock_limits(conn: Connection, task_ids: Sequence[str]) -> dict[str, RunLimit]:
    """Lock the rows of ``task_ids`` that have a ``max_runs`` (id order; SQLite: BEGIN IMMEDIATE
    serialises writers already) and read each one's limit; tasks without one are left out."""
    if not task_ids:
        return {}
    query = (select(tasks.c.id, tasks.c.max_runs, tasks.c.runs_counted, tasks.c.limit_reached_at)
             .where(tasks.c.id.in_(sorted(set(task_ids))), tasks.c.max_runs.is_not(None)).order_by(tasks.c.id))
    if dialect_kind(conn) != "sqlite":
        query = query.with_for_update()
    return {row.id: RunLimit(int(row.max_runs), int(row.runs_counted), row.limit_reached_at is not None)
            for row in conn.execute(query)}


def over_limit(limits: dict[str, RunLimit], requests: Sequence[ClaimRequest]) -> list[ClaimRequest]:
    """The scheduled ``requests`` whose task's limit is spent: they must not be seated."""
    return [r for r in requests if r.trigger in COUNTED and r.task_id in limits and limits[r.task_id].spent]


def count_runs(conn: Connection, limits: dict[str, RunLimit], seated: Sequence[ClaimRequest]) -> list[str]:
    """Count the scheduled runs just seated (at most one per task: one slot) of the limited
    tasks; disable those that reached their limit with it. The tasks disabled."""
    last = {r.task_id: r.occurrence_id for r in seated if r.trigger in COUNTED and r.task_id in limits}
    if not last:
        return []
    conn.execute(update(tasks).where(tasks.c.id.in_(sorted(last))).values(runs_counted=tasks.c.runs_counted + 1))
    reached = sorted(t for t in last if limits[t].counted + 1 >= limits[t].max_runs)
    if reached:
        _disable(conn, {t: (limits[t].counted + 1, last[t]) for t in reached})
    return reached


def _disable(conn: Connection, reached: dict[str, tuple[int, str]]) -> None:
    """Disable the tasks that reached their limit, marked so, in this transaction: revision and
    tasks version bumped (every node stops planning them), one audit line each."""
    now = db_now_ms()
    ids = sorted(reached)
    was = {row.id: row for row in conn.execute(select(tasks.c.id, tasks.c.enabled, tasks.c.team)
                                                .where(tasks.c.id.in_(ids)))}
    conn.execute(update(tasks).where(tasks.c.id.in_(ids)).values(
        enabled=False, limit_reached_at=now, revision=tasks.c.revision + 1,
        updated_at=greatest(conn, now, tasks.c.updated_at + 1)))
    bump_tasks_version(conn)
    conn.execute(audit_log.insert().values([{
        "id": str(uuid.uuid4()), "at": now, "actor": DISABLED_BY, "action": "task.disable", "target": task_id,
        "before": {"enabled": bool(was[task_id].enabled) if task_id in was else False},
        "after": {"enabled": False, "max_runs": runs}, "reason": limit_reason(runs, occurrence_id),
        "team": was[task_id].team if task_id in was else None} for task_id, (runs, occurrence_id) in reached.items()]))


def limit_reason(runs: int, occurrence_id: str) -> str:
    return f"reached max_runs: {runs} scheduled runs started (last: {occurrence_id})"


__all__ = ["COUNTED", "SPENT_REASON", "RunLimit", "count_runs", "limit_reason", "limited", "lock_limits",
           "over_limit"]
