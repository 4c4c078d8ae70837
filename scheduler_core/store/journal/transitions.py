"""The journal's transitions, declared once: from which status to which, by which function of
this package, made by whom, under which guard. The writing modules (``WRITERS``) use these
entries for their status guards and checks; docs/semantics.md ("6a. Journal transitions")
carries the same table, and tests/unit/test_journal_transitions.py fails when the two differ or
when a writing module has a public function that is not a transition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler_core.statuses import ExecutionStatus

S = ExecutionStatus
WRITERS = ("claims", "handoff", "owners", "expiry", "settled")  # the modules of this package that write
NEW_ROW = "none (new row)"
DELETED = "none (deleted)"
UNCHANGED = "unchanged"


@dataclass(frozen=True)
class Transition:
    """One row of the table. ``source`` empty: the transition makes the row; ``target`` empty: it
    deletes the row; ``target`` None: the status stays as it was (lease, attempts, logs change)."""

    function: str
    source: tuple[ExecutionStatus, ...]
    target: tuple[ExecutionStatus, ...] | None
    who: str
    guard: str

    @property
    def only_source(self) -> ExecutionStatus:
        """The one status the transition starts from (for a status guard in SQL)."""
        (status,) = self.source
        return status

    @property
    def only_target(self) -> ExecutionStatus:
        """The one status the transition ends in."""
        (status,) = self.target or ()
        return status

    def check(self, status: Any) -> ExecutionStatus:
        """``status`` as the status this transition ends in; ValueError when it is not one."""
        if self.target is None or status not in self.target:
            raise ValueError(f"{self.function} does not end a journal row {status!r}")
        return ExecutionStatus(status)

    def cells(self) -> tuple[str, str, str, str, str]:
        """The row as docs/semantics.md writes it (without the Markdown code marks)."""
        def statuses(values: tuple[ExecutionStatus, ...] | None, empty: str) -> str:
            return UNCHANGED if values is None else ", ".join(values) if values else empty

        return (statuses(self.source, NEW_ROW), statuses(self.target, DELETED), self.function, self.who, self.guard)


OWNED = "owned: its token, running, lease unexpired at the DB clock, row locked first"
EXPIRED = "the expired row as read (same token, running, lease expired), not locked by another transaction"
NOT_JOURNALED = "the occurrence id is not journaled yet"

CLAIM = Transition("claim", (), (S.RUNNING,), "a node: its tick's due occurrences, a manual trigger", NOT_JOURNALED)
SKIP = Transition("skip", (S.RUNNING,), (S.SKIPPED,), "the claiming node, in the claim's transaction",
                  "the task's slot is held (reason slot_busy), or as many as its overlap policy allows wait for "
                  "it already (reason buffer_full), or the task's max_runs is spent (reason max_runs)")
BUFFER = Transition("buffer", (S.RUNNING,), (S.QUEUED,), "the claiming node, in the claim's transaction",
                    "a cron occurrence whose task's slot is held, or others wait for it, and whose overlap policy "
                    "lets it wait (reason buffered), below its limit counted under the task's lock")
DELAY = Transition("delay", (S.RUNNING,), (S.QUEUED,), "the claiming node, in the claim's transaction",
                   "a cron occurrence of a task with a jitter: queued (reason jitter) until its delayed start, "
                   "next_attempt_at")
ENQUEUE = Transition("enqueue", (), (S.QUEUED,),
                     "a node that cannot run the task (manual trigger), the gap check (catch-up run), an operator's "
                     "backfill", NOT_JOURNALED)
BACKFILL = Transition("backfill", (S.MISSED, S.SKIPPED), (S.QUEUED,), "an operator's backfill",
                      "the row is still missed (one minute, not a summary row) or skipped: the minute never ran")
MISS = Transition("miss", (), (S.MISSED,), "the gap check, the capability watch, a trigger no live node can run",
                  NOT_JOURNALED)
CLAIM_QUEUED = Transition("claim_queued", (S.QUEUED,), (S.RUNNING,), "a node able to run the task", "still queued")
REQUEUE = Transition("requeue", (S.RUNNING,), (S.QUEUED,), "the claiming node, in the claim's transaction",
                     "a catch-up run, a backfill run or a buffered cron occurrence whose task's slot is held")
SETTLE_QUEUED = Transition("settle_queued", (S.QUEUED,), (S.MISSED, S.INTERRUPTED), "a node's scan of queued rows",
                           "still queued, and no live node can run the task (missed) or the task is gone (interrupted)")
BEGIN = Transition("begin", (S.RUNNING,), None, "the owner, before each attempt", OWNED)
RENEW = Transition("renew", (S.RUNNING,), None, "the owner's lease keeper",
                   "its token, running, lease unexpired at the DB clock; no lock first")
GIVE_UP = Transition("give_up", (S.RUNNING,), None, "the owner closing an idempotent run with attempts left", OWNED)
FINISH = Transition("finish", (S.RUNNING,), (S.SUCCESS, S.FAILED, S.INTERRUPTED, S.UNKNOWN),
                    "the owner: its terminal commit", OWNED)
TAKE_OVER = Transition("take_over", (S.RUNNING,), None, "any node's expiry scan", EXPIRED)
MARK_UNKNOWN = Transition("mark_unknown", (S.RUNNING,), (S.UNKNOWN,), "any node's expiry scan",
                          f"{EXPIRED}; an attempt began")
MARK_INTERRUPTED = Transition("mark_interrupted", (S.RUNNING,), (S.INTERRUPTED,), "any node's expiry scan",
                              f"{EXPIRED}; no attempt began")
RESOLVE = Transition("resolve", (S.UNKNOWN,), (S.SUCCESS, S.DISCARDED), "an operator",
                     "still unknown, updated_at as the operator read it")
MARK_PERSISTED = Transition("mark_persisted", (S.SUCCESS, S.FAILED, S.INTERRUPTED, S.UNKNOWN, S.DISCARDED), None,
                            "a recovery settle, any node's log repair", "log_persistence is pending")
DELETE_RETAINED = Transition("delete_retained", (S.SUCCESS, S.FAILED, S.INTERRUPTED, S.DISCARDED, S.SKIPPED, S.MISSED),
                             (), "any node's housekeeping, prune_journal()",
                             "changed before the retention (a keyed one: at least 30 days), no slot points at it, "
                             "logs not pending")

TRANSITIONS = (CLAIM, SKIP, BUFFER, DELAY, ENQUEUE, BACKFILL, MISS, CLAIM_QUEUED, REQUEUE, SETTLE_QUEUED, BEGIN, RENEW,
               GIVE_UP, FINISH, TAKE_OVER, MARK_UNKNOWN, MARK_INTERRUPTED, RESOLVE, MARK_PERSISTED, DELETE_RETAINED)
