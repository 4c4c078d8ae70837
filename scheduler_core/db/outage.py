"""While the database does not answer: since when, said once, and how long to wait before asking again.

A failover leaves seconds without a primary. Every part of a node that talks to the database
(the tick, the lease keeper, a runner's begin or terminal commit) meets it at once; each reports
to the node's one ``Outage``, which logs one line when the outage begins and one when it ends
(never a traceback per try), and tells ``/healthz`` (``Scheduler.outage``) since when.
``Backoff`` spaces the tries: bounded, jittered, so that nodes coming back do not ask in step.
Whether an error is an outage at all: ``is_unreachable``; ``report`` sorts a
failure into the outage (one line for all of it) or the log (with its traceback: a bug).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import DBAPIError

from scheduler_core.db.engine import NOT_THE_PRIMARY
from scheduler_core.errors import DatabaseConnectionError

logger = logging.getLogger("scheduler_core.outage")


# MySQL / MariaDB client and server errors that mean the link or the server went away:
# can't connect (2002, 2003), gone away (2006), lost during a query (2013, 2055), shutting down
# (1053), connection killed (1927), idle disconnect (4031), WSREP not ready (1047).
_MYSQL_UNREACHABLE = frozenset({1047, 1053, 1927, 2002, 2003, 2006, 2013, 2055, 4031})


def is_unreachable(exc: BaseException | None) -> bool:
    """The database did not answer, or the server answering is not a writable primary (a standby
    after a failover, a server shutting down): nothing in the request is wrong, and whether a write
    it carried was committed is unknown. Asking again once it answers is how to know.

    Looked for along the cause chain: the store wraps driver errors in :class:`DatabaseError`.
    Lock contention (``is_retryable``), a statement timeout or a refused row are not this.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DatabaseConnectionError):
            return True
        if isinstance(exc, DBAPIError):
            if exc.connection_invalidated:
                return True
            if _link_error(exc.orig):
                return True
        elif _link_error(exc):
            return True
        exc = exc.__cause__
    return False


def _link_error(orig: BaseException | None) -> bool:
    code = getattr(orig, "sqlstate", None)
    if code is not None or type(orig).__module__.startswith("psycopg"):
        # psycopg: a connection-level OperationalError carries no SQLSTATE; class 08 is the
        # connection-exception class; NOT_THE_PRIMARY the standby / shutdown refusals.
        operational = any(c.__name__ == "OperationalError" for c in type(orig).__mro__)  # and ConnectionTimeout
        return (code is None and operational) or (
            isinstance(code, str) and (code.startswith("08") or code in NOT_THE_PRIMARY))
    args = getattr(orig, "args", ())
    if type(orig).__module__.startswith("pymysql") and args and isinstance(args[0], int):
        return args[0] in _MYSQL_UNREACHABLE
    return False


def utc(seconds: float) -> str:
    """Unix seconds as an ISO-8601 UTC time to the second (``2026-12-03T17:40:00Z``)."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class Outage:
    """Since when this process finds the database unreachable (this host's clock: the database's
    is what is missing), logged once as it begins and once as it ends."""

    def __init__(self, who: str, log: logging.Logger = logger) -> None:
        self._who = who
        self._log = log
        self._lock = threading.Lock()
        self.since: float | None = None  # unix seconds
        self.tries = 0  # failed calls reported in this outage

    def failed(self, error: BaseException | str) -> float:
        """A call found the database unreachable; since when it is (the first report: now)."""
        with self._lock:
            self.tries += 1
            if self.since is None:
                self.since = time.time()
                self._log.warning("%s: database unreachable since %s: %s; retrying with back-off",
                                  self._who, utc(self.since), _first_line(error))
            return self.since

    def report(self, error: BaseException, log: logging.Logger, message: str, *args: Any) -> bool:
        """A call failed with ``error``: True when it is the database not answering (counted in
        the outage, no line of its own); otherwise ``message`` is logged with the traceback."""
        if is_unreachable(error):
            self.failed(error)
            return True
        log.warning(message, *args, exc_info=error)
        return False

    def answered(self) -> None:
        """A call was answered: an outage in progress is over."""
        if self.since is None:  # the common case, without the lock
            return
        with self._lock:
            if self.since is not None:
                self._log.warning("%s: database reachable again after %.1f s (unreachable since %s, %d failed calls)",
                                  self._who, time.time() - self.since, utc(self.since), self.tries)
                self.since, self.tries = None, 0

    @property
    def unreachable_since_ms(self) -> int | None:
        since = self.since
        return None if since is None else int(since * 1000)


def _first_line(error: BaseException | str) -> str:
    if isinstance(error, str):
        return error
    text = str(error).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {line[:300]}" if line else type(error).__name__


class Backoff:
    """Waits between tries: ``first`` doubling up to ``most`` seconds, each drawn from the upper
    half of the current step ("equal jitter"), so that it is bounded and never in step with
    another node's; ``reset`` once an answer came."""

    def __init__(self, first: float = 0.1, most: float = 2.0) -> None:
        if not 0 < first <= most:
            raise ValueError("Backoff: 0 < first <= most")
        self._first = first
        self._most = most
        self._step = first

    def next(self) -> float:
        step = self._step
        self._step = min(self._most, step * 2)
        return random.uniform(step / 2, step)

    def reset(self) -> None:
        self._step = self._first
