"""A node's housekeeping at the end of a tick: log retention and journal retention.

Log retention runs every ``RETENTION_EVERY_S``; journal retention as often, and on every tick
while a pass left rows due (a few short batches per tick, so a backlog drains without one
long transaction). Settings: ``SchedulerConfig.max_logs`` / ``retention_days`` /
``journal_retention_days`` (docs/semantics.md)."""

from __future__ import annotations

import logging
import time

from scheduler_core.runtime.context import RuntimeContext

logger = logging.getLogger("scheduler_core.node")
RETENTION_EVERY_S = 600
JOURNAL_BATCHES_PER_TICK = 4  # journal retention batches (500 rows each) one tick runs at most


class Housekeeping:
    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx
        self._last_retention = time.monotonic()
        self._last_journal_retention = time.monotonic()
        self._journal_backlog = False  # the last journal retention pass stopped with rows still due

    def run(self) -> None:
        now = time.monotonic()
        config = self.ctx.config
        if (config.max_logs or config.retention_days) and now - self._last_retention >= RETENTION_EVERY_S:
            self._last_retention = now
            try:
                self.ctx.logs.prune(config.max_logs, config.retention_days)
            except Exception:
                logger.warning("log retention failed (logs kept)", exc_info=True)
        if config.journal_retention_days and (self._journal_backlog
                                              or now - self._last_journal_retention >= RETENTION_EVERY_S):
            # a few short batches per tick (the tick waits for them); while more are due, the
            # next tick goes on, so a backlog drains at JOURNAL_BATCHES_PER_TICK batches a tick
            self._last_journal_retention = now
            self._journal_backlog = False
            try:
                pruned = self.ctx.journal_retention.prune(config.journal_retention_days,
                                                          max_batches=JOURNAL_BATCHES_PER_TICK)
                self._journal_backlog = pruned.more
            except Exception:
                logger.warning("journal retention failed (rows kept)", exc_info=True)
