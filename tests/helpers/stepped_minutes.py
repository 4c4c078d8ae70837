"""Multi-process tests that step every node's DB clock a minute at a time (tests/multinode): the
stepped clock, the journal by task and minute, and a wait on it that fails as soon as a node
process has died."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core.testing import set_clock_offset
from tests.helpers.node_cluster import db_now, journal

MINUTE = 60_000

Rows = dict[str, dict[int, tuple[str, str | None]]]


def minute_rows(engine: Engine) -> Rows:
    """The journal: (status, reason) by task and scheduled minute."""
    found: Rows = {}
    for row in journal(engine):
        found.setdefault(row.task_id, {})[row.scheduled_minute] = (row.status, row.reason)
    return found


def until_rows(what: str, check: Any, engine: Engine, procs: list[Any], timeout: float = 60) -> None:
    """Wait until ``check(minute_rows(engine))``; fail naming ``what`` after ``timeout`` s, or at
    once with a node's stderr when one of ``procs`` has exited."""
    deadline = time.monotonic() + timeout
    while not check(minute_rows(engine)):
        for proc in procs:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, (what, minute_rows(engine))
        time.sleep(0.1)


class SteppedClock:
    """The test's DB clock and its nodes' (``clock_file`` of tests/helpers/node_process.py),
    3 s before ``minutes[0]``, the minute after next; ``step()`` moves both a minute on."""

    def __init__(self, engine: Engine, tmp_path: Path, count: int) -> None:
        now = db_now(engine)
        self.engine, self.file = engine, tmp_path / "clock"
        self.minutes = [now - now % MINUTE + (2 + i) * MINUTE for i in range(count)]
        self.offset = self.minutes[0] - 3_000 - now
        self._set()

    @property
    def env(self) -> dict[str, str]:
        """A node's environment: its DB clock where the test's is."""
        return {"HAI_TEST_DB_CLOCK_OFFSET_MS": str(self.offset)}

    def step(self) -> None:
        self.offset += MINUTE
        self._set()

    def _set(self) -> None:
        self.file.write_text(str(self.offset))
        set_clock_offset(self.engine, self.offset)
