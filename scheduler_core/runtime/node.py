"""The node: tick loop, claims, expiry scan, dispatch to a bounded pool, heartbeat.

The loop wakes at the next due minute on the DB clock (or after ``tick_interval_ms``), and at
once when a thread frees while claimed-for work waits; what one tick does: docs/architecture.md (4)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from scheduler_core.cron import cron_occurrence_id
from scheduler_core.db.outage import Backoff
from scheduler_core.model import TaskDefinition
from scheduler_core.runtime.clock_watch import ClockWatch, Reading, jump_tolerance_ms
from scheduler_core.runtime.collector import BurstCollector
from scheduler_core.runtime.context import RuntimeContext
from scheduler_core.runtime.housekeeping import Housekeeping
from scheduler_core.runtime.misses import CapabilityWatch, GapCheck
from scheduler_core.runtime.planner import DueOccurrence, Planner, definition_problem
from scheduler_core.runtime.queued import QueuedClaims
from scheduler_core.runtime.recovery import ExpiryRecovery, claimed_execution
from scheduler_core.runtime.run_pool import RunPool
from scheduler_core.runtime.runner import Ownership, Runner
from scheduler_core.runtime.spread import Capability, Spread
from scheduler_core.statuses import Trigger
from scheduler_core.store import ClaimOutcome, ClaimRequest, NodeRepository, TickSnapshot
from scheduler_core.store.transactions import AutocommitLine, is_unreachable, read

logger = logging.getLogger("scheduler_core.node")
CLAIM_BATCH = 100  # the median start of a busy minute comes sooner than with larger batches (RESULTS.md §2)
FIRST_CLAIM = 50  # the first claim of a busy minute takes at least this many (bench/RESULTS.md §2)
TICK_BACKOFF_MAX_S = 2.0  # the longest a node waits to ask again while the database does not answer
BOUNDARY_MARGIN_MS = 2  # wake this much after a minute begins (DB clock), so that it has begun


class Node:
    def __init__(self, ctx: RuntimeContext, nodes: NodeRepository,
                 refresh: Callable[[int | None], dict[str, TaskDefinition]]) -> None:
        self.ctx = ctx
        self.nodes = nodes
        self.refresh = refresh  # (known version or None) -> current definitions
        self.planner = Planner()
        self.runs = RunPool(ctx, self._freed)  # runtime/run_pool.py
        self._loop: threading.Thread | None = None
        self._stopping = threading.Event()
        self._room = threading.Event()  # a thread freed up while occurrences wait in the backlog
        self._tasks_version: int | None = None
        self._last_heartbeat = 0.0
        self._last_tick_ms: int | None = None  # the previous tick's duration (node clock)
        self._tick_lock = threading.Lock()
        self.accepting = False
        self.listeners: list[Callable[[int], None]] = []  # called each tick with the DB time
        # Claim tokens derive from this (random per node instance) and the occurrence id: a claim retried
        # after its answer was lost carries the same token (journal.claim); no other claimer has it.
        self._token_namespace = uuid.uuid4()
        self._unanswered: set[str] = set()  # occurrence ids whose claim call failed
        self._theirs: set[DueOccurrence] = set()  # backlog items of another node's share
        self._gap = GapCheck(ctx)  # runtime/misses.py
        self._watch = CapabilityWatch(grace_s=ctx.config.tick_interval_ms / 1000)
        self._tick_line = AutocommitLine(ctx.tasks.engine)  # the tick snapshot: one round trip
        beat = ctx.config.heartbeat_interval_ms
        # which due occurrences it claims first (and, on Galera, whose database clock is ahead)
        self._spread = Spread(ctx.node_id, nodes, 3 * beat, beat / 1000, ctx.skew)
        self._recovery = ExpiryRecovery(ctx, self.planner, self.runs.free_capacity, self.runs.submit)
        self._clock_watch = ClockWatch(jump_tolerance_ms(ctx.config.lease_ms))  # runtime/clock_watch.py
        self._queued = QueuedClaims(ctx, self.planner, self._runnable, self.runs.free_capacity, self.runs.submit)
        self._housekeeping = Housekeeping(ctx)
        self._collector = BurstCollector(  # before a busy minute: the live nodes read, then gc
            self.planner, ctx.clock, ctx.config.tick_interval_ms, self._spread.refresh_if_stale)
        # The database did not answer the last tick: the next one comes after this back-off (db/outage.py)
        interval_s = ctx.config.tick_interval_ms / 1000
        self._backoff = Backoff(first=interval_s, most=max(interval_s, TICK_BACKOFF_MAX_S))
        self._retry_in: float | None = None
        # Starts before bookkeeping: terminal commits wait (bounded) while this node has starts
        # to make, so that a burst's claims and begins do not share the CPU with them.
        ctx.writes.finishes.defer_while(self._starts_pending)

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        self.runs.start()
        self.accepting = True
        self._stopping.clear()
        self._loop = threading.Thread(target=self._run, name=f"hai-tick-{self.ctx.node_id[:24]}", daemon=True)
        self._loop.start()

    def stop(self) -> None:
        """Stop intake (no more ticks or claims); running executions go on."""
        self.accepting = False
        self._stopping.set()
        self._room.set()  # wakes the loop now
        if self._loop is not None and self._loop is not threading.current_thread():
            self._loop.join()
        self._loop = None
        with self._tick_lock:  # a tick in progress finishes its dispatch first
            self._tick_line.close()
            self._read_back_unanswered()

    def _read_back_unanswered(self) -> None:
        """At stop, the claims and takeovers whose answer was lost are read back, not left running
        under a token nobody holds until their lease runs out: the ones this node holds run (stop)
        or end ``interrupted`` at once (close cancels them before their begin)."""
        try:
            for pending in (self._recovery, self._queued):
                if pending.unanswered:
                    pending.resolve_unanswered()
        except Exception as exc:
            logger.warning("node %s stopped with claims whose answer was lost; their leases settle them: %s",
                           self.ctx.node_id, exc)

    # --- the loop -----------------------------------------------------------------------

    def _run(self) -> None:
        """Tick, then wait: until the next due minute (DB clock) or ``tick_interval_ms``, whichever
        comes first; meanwhile claim at once whenever a thread frees and the backlog waits."""
        warm = False  # the start path's statements built before the first busy minute (store/executions.py),
        while not self._stopping.is_set():  # once the database answered (not a connect timeout in an outage)
            if self.tick() and not warm:
                self._warm_up()
                warm = True
            self._collector.before_next_minute()  # runtime/collector.py
            deadline = time.monotonic() + (self._wait_s() if self._retry_in is None else self._retry_in)
            while not self._stopping.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                if self._room.wait(remaining):
                    self._room.clear()
                    self._claim_freed()

    def _wait_s(self) -> float:
        """Until the next tick: the tick interval, or less when a minute with due occurrences
        begins sooner on the DB clock (estimated from the last snapshot; a tick that comes too
        early sees that minute not yet due and waits again, the rest of the way)."""
        interval = self.ctx.config.tick_interval_ms / 1000
        fire = self.planner.next_fire()
        if fire is None:
            return interval
        until = (fire - self.ctx.clock.now_ms() + BOUNDARY_MARGIN_MS) / 1000
        return max(0.0, min(interval, until))

    def shutdown_pool(self) -> None:
        """Wait for the pool's runners to end -- their terminal commits decided, too."""
        self.runs.shutdown()
        try:
            self.nodes.mark_stopped(self.ctx.node_id)
        except Exception:
            logger.warning("could not mark node %s stopped", self.ctx.node_id, exc_info=True)

    def _freed(self) -> None:
        if self.planner.backlog:
            self._room.set()

    def _claim_freed(self) -> None:
        """A thread freed while occurrences wait: claim for it now, not at the next tick."""
        if not self.accepting:
            return
        with self._tick_lock:
            try:
                self._claim_backlog()
            except Exception as exc:
                self.ctx.outage.report(exc, logger, "claim for a freed thread failed on node %s; the next tick "
                                       "retries", self.ctx.node_id)

    # --- the tick -----------------------------------------------------------------------

    def tick(self) -> bool:
        """One tick; True if the database answered it."""
        if not self.accepting:
            return False
        with self._tick_lock:
            began = time.monotonic()
            try:
                self._tick()
            except Exception as exc:
                if is_unreachable(exc):  # no primary (a failover): one line for the whole outage, then back off
                    self.ctx.outage.failed(exc)
                    self._retry_in = self._backoff.next()
                else:
                    self._retry_in = None
                    logger.exception("tick failed on node %s; next tick retries", self.ctx.node_id)
            else:
                self.ctx.outage.answered()
                self._backoff.reset()
                self._retry_in = None
                return True
            finally:  # reported with the next heartbeat (nodes.last_tick_ms, for /metrics)
                self._last_tick_ms = int((time.monotonic() - began) * 1000)
            return False

    def _warm_up(self) -> None:
        try:
            self.ctx.executions.warm_up(self.ctx.tasks.version)
        except Exception as exc:  # its first busy minute pays for it, as without a warm-up
            logger.warning("warm-up of the claim path failed on node %s: %s", self.ctx.node_id, exc)

    def _tick(self) -> None:
        sent = time.monotonic()
        snapshot = self._snapshot()
        jump = self._clock_watch.observe(Reading(snapshot.now_ms, sent, time.monotonic()))
        if jump is not None:
            self._clock_jumped(jump)
        self.ctx.clock.observe(snapshot.now_ms)
        if snapshot.tasks_version != self._tasks_version:
            definitions = self.refresh(snapshot.tasks_version)
            self._tasks_version = snapshot.tasks_version
            self.planner.sync(definitions, snapshot.now_ms)
            self._cancel_stale_runners(definitions)
        if self._recovery.unanswered:
            self._recovery.resolve_unanswered()  # takeovers whose COMMIT was not answered
        if self._recovery.due(snapshot.leases_expired, snapshot.earliest_lease_until):
            self._recovery.recover_expired(snapshot.earliest_lease_until)  # runtime/recovery.py
        due = self.planner.due(snapshot.now_ms)
        self._watch.add(d for d in due if not self._runnable(d.task_id))
        due = [d for d in due if self._runnable(d.task_id)]
        mine, theirs = self._spread.order(due, self._capability)  # runtime/spread.py
        self.planner.backlog.extend(mine + theirs)
        self._theirs.update(theirs)
        try:
            self._claim_backlog()
        finally:
            self.planner.replan()
        self._gap.close(snapshot, self.planner.tasks())  # after the claims: its write does not delay them
        # Queued rows after this minute's claims: a catch-up run waits for its task's slot, so
        # the minute that is due now is never skipped because a catch-up run took the slot first.
        self._queued.scan(snapshot.latest_queued, snapshot.now_ms)  # runtime/queued.py
        if due:
            self._spread.refresh_if_stale()
        if self._watch:
            self._settle_watched()
        self._housekeeping.run()  # runtime/housekeeping.py
        for listener in list(self.listeners):
            try:
                listener(snapshot.now_ms)
            except Exception:
                logger.warning("tick listener %r failed", listener, exc_info=True)

    def _clock_jumped(self, jump_ms: int) -> None:
        """The database clock jumped ``jump_ms`` against this node's: renew every lease it holds now
        (a jump ahead shortened them all by as much), and journal it on its node row (the nodes page,
        /healthz and the database.clock_jump alert read it there). docs/semantics.md, "Time"."""
        logger.warning("the database clock jumped %+d ms against node %s's clock (a failover to a server with "
                       "another clock?); renewing its leases now", jump_ms, self.ctx.node_id)
        self.ctx.leases.renew_now()
        try:
            self.nodes.record_clock_jump(self.ctx.node_id, jump_ms)
        except Exception:
            logger.warning("journaling the clock jump on node %s failed", self.ctx.node_id, exc_info=True)

    def _snapshot(self) -> TickSnapshot:
        """The tick's one statement; every heartbeat interval it is the heartbeat's UPDATE,
        which carries the snapshot back (RETURNING)."""
        now = time.monotonic()
        if now - self._last_heartbeat < self.ctx.config.heartbeat_interval_ms / 1000:
            return self.ctx.tasks.tick_snapshot(leases=True, line=self._tick_line)
        self._last_heartbeat = now
        row = self.nodes.heartbeat(self.ctx.node_id, socket.gethostname(), os.getpid(),
                                   self.ctx.tasks.snapshot_columns(leases=True), sorted(self.ctx.capabilities),
                                   self.ctx.config.groups, self._last_tick_ms)
        assert row is not None
        return self.ctx.tasks.snapshot_from(row)

    def _capability(self, task_id: str) -> Capability:
        task = self.planner.task(task_id)
        return ("", None) if task is None else (task.handler_kind, task.node_group)

    def _runnable(self, task_id: str) -> bool:
        task = self.planner.task(task_id)
        return task is not None and self.ctx.can_run(task)

    def _starts_pending(self) -> bool:
        """Due work this node has yet to start: occurrences in the backlog, runners waiting for a
        thread, begins queued or being written."""
        return bool(self.planner.backlog) or self.runs.waiting > 0 or self.ctx.writes.begins.pending()

    def _claim_backlog(self) -> None:
        """Claim from the backlog while there is room, in batches that double from twice the
        threads (at least ``FIRST_CLAIM``) up to ``CLAIM_BATCH``: the threads get their first
        work after a small claim (a few ms), and the larger claims that follow overlap with
        their running."""
        backlog, theirs = self.planner.backlog, self._theirs
        size = max(FIRST_CLAIM, 2 * self.ctx.config.max_concurrency)
        pruned = False
        while backlog and self.accepting:
            other = backlog[0] in theirs  # another node's share: for idle threads only (runtime/spread.py)
            room = min(self.runs.free_threads() if other else self.runs.free_capacity(), size, CLAIM_BATCH)
            if room == 0:
                return
            if other and not pruned:
                pruned = True
                self._drop_journaled_theirs()
                continue
            batch: list[DueOccurrence] = []
            while backlog and len(batch) < room and (backlog[0] in theirs) == other:
                batch.append(backlog.popleft())
            self._claim_batch(batch)
            theirs.difference_update(batch)
            size *= 2

    def _drop_journaled_theirs(self) -> None:
        """Drop from the backlog the occurrences of another node's share that the journal holds
        (its node claimed them meanwhile), with one read: claimed a few at a time for idle
        threads, each would have been a write transaction that found them taken, dozens of them
        in a busy minute, beside that node's own claims and begins. (Not one whose claim by this
        node went unanswered: its retry must find our row and run it.)"""
        backlog, theirs = self.planner.backlog, self._theirs
        ids = {due: cron_occurrence_id(due.task_id, due.minute_ms) for due in backlog if due in theirs}
        asked = [i for i in ids.values() if i not in self._unanswered]
        journaled = self.ctx.executions.journaled(asked)
        if not journaled:
            return
        gone = {due for due, i in ids.items() if i in journaled}
        kept = [due for due in backlog if due not in gone]
        backlog.clear()
        backlog.extend(kept)
        theirs.difference_update(gone)

    def _claim_batch(self, batch: list[DueOccurrence]) -> None:
        requests = []
        for due in batch:
            task = self.planner.task(due.task_id)
            occurrence_id = cron_occurrence_id(due.task_id, due.minute_ms)
            if task is None:
                self._unanswered.discard(occurrence_id)
                continue
            requests.append(ClaimRequest(
                occurrence_id=occurrence_id, task_id=due.task_id, task_revision=due.revision, trigger=Trigger.CRON,
                max_attempts=task.max_attempts, token=str(uuid.uuid5(self._token_namespace, occurrence_id)),
                scheduled_minute=due.minute_ms, retry=occurrence_id in self._unanswered,
                waiting_limit=task.overlap_policy.waiting_limit, run_limited=task.max_runs is not None,
                not_before=task.delayed_start(due.minute_ms)))
        if not requests:
            return
        try:  # the tasks version after the claim, read in its transaction (_definitions_after_claim)
            results, version = self.ctx.executions.claim_then(requests, self.ctx.tasks.version)
        except Exception:
            # Seen: keep them until journaled. The COMMIT may have been applied all the same
            # (its answer lost): the retry, same tokens, finds its own rows and runs them.
            self._unanswered.update(r.occurrence_id for r in requests)
            self.planner.backlog.extendleft(reversed(batch))
            raise
        self._unanswered.difference_update(r.occurrence_id for r in requests)
        claimed = {r.occurrence_id for r in results if r.outcome == ClaimOutcome.CLAIMED}
        mine = [r for r in requests if r.occurrence_id in claimed]
        if mine:
            self._dispatch_claimed(mine, version)

    def _dispatch_claimed(self, requests: list[ClaimRequest], version: int) -> None:
        definitions = self._definitions_after_claim(version, [r.task_id for r in requests])
        runners = []
        for r in requests:
            execution = claimed_execution(r, self.ctx.node_id)
            found = definitions.get(r.task_id)
            task = found if isinstance(found, TaskDefinition) else None
            runner = Runner(self.ctx, Ownership(execution, r.token, task, []))
            if isinstance(found, Exception):
                runner.owned.task = None
                runner.signal.cancel("unreadable")
            runners.append(runner)
        self.runs.submit_all(runners)

    def _definitions_after_claim(self, version: int, task_ids: list[str]) -> dict[str, TaskDefinition | Exception]:
        """The definitions as stored after the claim, for the whole batch.

        ``version`` is the tasks version read in the claim's transaction, after its statements.
        The planner's definitions were read after the version this node last saw; if it has not
        moved, no task changed, and they are the stored ones. Else the batch's rows are read again.
        (A change committed later is the next tick's: ``_cancel_stale_runners``.)
        """
        if version == self._tasks_version:
            known = {task_id: self.planner.task(task_id) for task_id in task_ids}
            return {task_id: task for task_id, task in known.items() if task is not None}
        return read(self.ctx.executions.engine, lambda conn: self.ctx.tasks.get_many(conn, task_ids))

    # --- misses ---------------------------------------------------------------------------

    def _settle_watched(self) -> None:
        """Occurrences this node cannot run: journaled ``missed`` once no live node can run them."""
        _, alive = self.ctx.nodes.alive(3 * self.ctx.config.heartbeat_interval_ms)

        def capable(task: TaskDefinition) -> bool:
            return any(node.can_run(task.handler_kind, task.node_group) for node in alive)

        missed = self._watch.settle(self.ctx.executions.journaled, self.planner.task, capable)
        if missed:
            self.ctx.handoff.journal_missed(missed)

    # --- definitions changed under running executions ------------------------------------

    def _cancel_stale_runners(self, definitions: dict[str, TaskDefinition]) -> None:
        for runner in self.ctx.runners():
            problem = definition_problem(runner.owned.execution, definitions.get(runner.owned.execution.task_id))
            if problem:
                runner.signal.cancel(problem)

