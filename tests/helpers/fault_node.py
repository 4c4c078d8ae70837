"""A scheduler node in its own OS process that can SIGKILL (or SIGSTOP) itself at a named point.

Usage: fault_node.py URL NODE_ID EVENTS_FILE [options as JSON]

Options: {"lease_ms": 1500, "tick_interval_ms": 100, "max_concurrency": 4,
          "sleep_s": {"task-id": seconds}, "trace": false, "connect_timeout_ms": 10000}

Environment: ``HAI_FAULT_KILL_AT`` names the point, ``HAI_FAULT_TASK`` the task whose
execution it watches (default: any), ``HAI_FAULT_SIGNAL`` the signal (SIGKILL or SIGSTOP);
``HAI_TEST_DB_CLOCK_OFFSET_MS`` moves the node's DB clock (scheduler_core.testing).
The points are recognised with SQLAlchemy engine events in this process by the table and the
kind of statement (never by exact SQL text, which the engine may batch differently), so no
product code knows about them:

- ``before_claim_commit``: on ``commit`` of a transaction that inserted into ``executions``
  a row of the watched task;
- ``after_claim_commit``: once that commit is done (the connection is checked in, or any
  statement runs next, whichever comes first);
- ``before_begin_commit``: on ``commit`` of a transaction that began an attempt (``UPDATE
  executions`` of the attempts), once a claim of the watched task has committed here (a begin's
  parameters name the occurrence, not the task: the tests that use it run one task);
- ``after_begin_commit``: once that commit is done (check-in, the next statement, or the
  handler called, whichever comes first: never after the handler's effect);
- ``in_handler``: the hook signals its own process right after recording its effect;
- ``after_handler``: in ``on_task_finish`` / ``on_task_error``, once the handler returned;
- ``before_finish``: after the handler returned, before an ``UPDATE executions`` that sets
  ``status`` executes;
- ``before_projection``: after the finish committed, before ``INSERT INTO logs`` executes
  (if the projection shares the finish's transaction, right after that commit instead);
- ``in_finish_before_projection`` (SIGSTOP only): inside the terminal commit's transaction,
  after its finish UPDATE and slot release, before its ``INSERT INTO logs``.

SIGSTOP at ``in_handler`` and ``after_handler`` is sent only while this process has no
database connection checked out (other than the tick's, held in autocommit outside any
transaction), so no open transaction holds a lock while it is stopped: new checkouts wait at a
gate until every connection is back in the pool. SIGSTOP at a statement
point stops the process right there, inside its transaction, with its locks held: a process
frozen (GC pause, VM freeze) in the middle of a write. SIGSTOP goes to the calling thread
(``pthread_kill``): sent to the process, the kernel hands it to the main thread, and under load
the calling thread could run on for milliseconds -- several statements -- before the group stop
reaches it.

Every line appended to EVENTS_FILE is JSON (see tests/helpers/oracle.py): ``ready``, one
``effect`` per handler call (recorded durably before the handler returns), ``kill`` just
before the signal, ``resumed`` after a SIGSTOP, and with ``trace`` this node's finishing,
beginning and renewing UPDATEs with their row counts (``write``; no count where the driver
cannot tell before the rows are fetched), which the pause and network tests read. SIGTERM
closes cleanly.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import re
import signal
import sys
import threading
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from scheduler_core import Scheduler, SchedulerConfig
from scheduler_core.db import create_engine
from scheduler_core.process_stop import stop_on_signals, wait_for_stop
from scheduler_core.testing import set_clock_offset_from_env
from tests.helpers.oracle import Effect, append_event, record_effect

POINTS = ("before_claim_commit", "after_claim_commit", "before_begin_commit", "after_begin_commit", "in_handler",
          "before_finish", "before_projection")
PAUSE_POINTS = ("in_handler", "after_handler")  # no statement running: SIGSTOP without holding locks
# SIGSTOP only: inside the terminal commit's transaction, after its finish UPDATE and slot
# release, before its INSERT INTO logs (the owner holds the row locks of a released slot).
FREEZE_POINTS = ("in_finish_before_projection",)
_UPDATE_EXECUTIONS = re.compile(r"^\s*UPDATE\s+executions\s+SET\s+(?P<set>.*?)\s+WHERE\s", re.IGNORECASE | re.DOTALL)
_INSERT_INTO = re.compile(r"^\s*INSERT\s+INTO\s+(?P<table>\w+)", re.IGNORECASE)


def statement_kind(statement: str) -> str | None:
    """What a statement does to the journal, by table and statement kind.

    ``claim`` (INSERT INTO executions), ``finish`` (UPDATE executions setting status),
    ``begin`` (UPDATE executions setting the attempts, not status), ``takeover`` (UPDATE
    executions setting the sequence: a new owner), ``renew`` (UPDATE executions setting only
    lease_until), ``projection`` (INSERT INTO logs).
    """
    inserted = _INSERT_INTO.match(statement)
    if inserted:
        return {"executions": "claim", "logs": "projection"}.get(inserted.group("table").lower())
    updated = _UPDATE_EXECUTIONS.match(statement)
    if not updated:
        return None
    columns = {c.strip().split("=")[0].strip().lower() for c in re.findall(r"(?:^|,)\s*(\w+)\s*=", updated["set"])}
    if "status" in columns:
        return "finish"
    if "attempts" in columns:
        return "begin"
    if "sequence" in columns:
        return "takeover"
    if columns == {"lease_until"}:
        return "renew"
    return None


class KillSwitch:
    """Watches this process's statements and signals it at ``point`` for ``task`` (once)."""

    def __init__(self, point: str | None, task: str | None, signal_name: str, events: str, node_id: str,
                 trace: bool) -> None:
        if point is not None and point not in (*POINTS, *PAUSE_POINTS, *FREEZE_POINTS):
            known = ", ".join((*POINTS, "after_handler", *FREEZE_POINTS))
            raise SystemExit(f"HAI_FAULT_KILL_AT must be one of {known} (got {point!r})")
        if signal_name not in ("SIGKILL", "SIGSTOP"):
            raise SystemExit(f"HAI_FAULT_SIGNAL must be SIGKILL or SIGSTOP (got {signal_name!r})")
        self.point, self.task, self.signal_name = point, task, signal_name
        self.events, self.node_id, self.trace = events, node_id, trace
        self.gate = threading.Lock()  # held while pausing: no connection may be checked out
        self.checked_out: set[Any] = set()  # the pool records of the connections checked out
        self.checked_out_lock = threading.Lock()
        self.handler_returned = False  # the watched task's handler came back (on_task_finish / _error)
        self.finish_committed = False
        self.claim_committed = False  # a claim of the watched task committed in this process
        self.armed_after_commit: str | None = None  # kill at the next opportunity, for this reason
        self._killing = threading.Lock()  # taken by the one thread that kills

    def install(self, engine: Engine) -> None:
        event.listen(engine, "checkout", self._on_checkout)
        event.listen(engine, "set_connection_execution_options", self._on_options)
        event.listen(engine, "begin", self._on_begin)
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)
        event.listen(engine, "commit", self._on_commit)
        event.listen(engine, "checkin", self._on_checkin)

    def watches(self, task_id: str) -> bool:
        return self.task in (None, task_id)

    def fire(self, point: str, where: str) -> None:
        """Signal this process if ``point`` is the armed one (and disarm: it fires once)."""
        if self.point != point:
            return
        self.point = None
        if self.signal_name == "SIGSTOP" and point in PAUSE_POINTS:
            self.pause(f"{point}: {where}")
        elif self.signal_name == "SIGSTOP":
            self.freeze(f"{point}: {where}")
        else:
            self.kill(point, where)

    def kill(self, point: str | None, where: str) -> None:
        """Record the kill and SIGKILL this process, once: a second thread reaching an armed point
        before the signal lands waits for it instead of recording a second kill."""
        if not self._killing.acquire(blocking=False):
            threading.Event().wait()  # the first thread's SIGKILL ends this process
        append_event(self.events, {"kind": "kill", "point": point, "where": where, "node": self.node_id,
                                   "pid": os.getpid()})
        os.kill(os.getpid(), signal.SIGKILL)

    def pause(self, where: str) -> None:
        """SIGSTOP this process at a moment when no connection is checked out (so no open
        transaction holds a lock while it is stopped); returns after SIGCONT.

        The gate is held only for the check and the signal, never while waiting: a thread that
        needs a connection meanwhile (the lease keeper) must not be starved of it.
        """
        while True:
            with self.gate:  # no checkout can start while we look and stop
                if not self._busy():
                    append_event(self.events, {"kind": "pause", "where": where, "node": self.node_id,
                                               "pid": os.getpid()})
                    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
                    break
            threading.Event().wait(0.001)  # not time.sleep: see scheduler_core.store.transactions._pause
        append_event(self.events, {"kind": "resumed", "node": self.node_id, "pid": os.getpid()})

    def freeze(self, where: str) -> None:
        """SIGSTOP right now, inside whatever transaction this thread has open."""
        append_event(self.events, {"kind": "pause", "where": f"frozen in a transaction, {where}",
                                   "node": self.node_id, "pid": os.getpid()})
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)  # this thread stops at once
        append_event(self.events, {"kind": "resumed", "node": self.node_id, "pid": os.getpid()})

    def _busy(self) -> int:
        """Connections checked out, except the tick line's: it holds one in autocommit, outside
        any transaction (marked when it switches to autocommit, see ``_on_options``)."""
        with self.checked_out_lock:
            return sum(1 for record in self.checked_out if not record.info.get("tick_line"))

    def _on_checkout(self, dbapi_connection: Any, record: Any, proxy: Any) -> None:
        with self.checked_out_lock:  # counted while it waits at the gate: the pause waits for it
            self.checked_out.add(record)
        with self.gate:
            pass

    @staticmethod
    def _on_options(conn: Connection, options: Any) -> None:
        if options.get("hai_autocommit"):  # only the tick line reads in autocommit
            conn.info["tick_line"] = True  # the pool record's info: cleared at check-in

    def _watched(self, parameters: Any) -> bool:
        return self.task is None or self.task in repr(parameters)

    @staticmethod
    def _seen(conn: Connection) -> set[str]:
        seen: set[str] = conn.info.setdefault("fault_seen", set())
        return seen

    def _on_begin(self, conn: Connection) -> None:
        conn.info["fault_seen"] = set()

    def _before(self, conn: Connection, cursor: Any, statement: str, parameters: Any, context: Any,
                executemany: bool) -> None:
        if self.armed_after_commit:
            self.kill(self.point, f"first statement after {self.armed_after_commit}")
        kind = statement_kind(statement)
        if kind is None:
            return
        seen = self._seen(conn)
        if kind == "claim" and self._watched(parameters):
            seen.add("claim")
        elif kind == "begin" and self.claim_committed:
            seen.add("begin")
        elif kind == "finish" and self.handler_returned:
            seen.add("finish")
            self.fire("before_finish", "before the finishing UPDATE executions")
        elif kind == "projection":
            seen.add("projection")
            if "finish" in seen:
                self.fire("in_finish_before_projection", "inside the terminal commit, before INSERT INTO logs")
            if self.finish_committed:
                self.fire("before_projection", "before INSERT INTO logs, the finish committed")

    def _after(self, conn: Connection, cursor: Any, statement: str, parameters: Any, context: Any,
               executemany: bool) -> None:
        if self.trace:
            kind = statement_kind(statement)
            if kind in ("finish", "renew", "begin"):
                # With RETURNING, SQLite counts rows only as they are fetched: no count then.
                unknown = " RETURNING " in statement.upper() and conn.dialect.name == "sqlite"
                count = None if unknown else cursor.rowcount
                append_event(self.events, {"kind": "write", "what": kind, "rowcount": count, "node": self.node_id,
                                           "sql": " ".join(statement.split())[:300]})

    def _on_commit(self, conn: Connection) -> None:
        seen = self._seen(conn)
        if "claim" in seen:
            self.fire("before_claim_commit", "on commit of the claim transaction")
            self.claim_committed = True
            if self.point == "after_claim_commit":
                self.armed_after_commit = "the claim commit"
        if "begin" in seen:
            self.fire("before_begin_commit", "on commit of the begin transaction")
            if self.point == "after_begin_commit":
                self.armed_after_commit = "the begin commit"
        if "finish" in seen:
            self.finish_committed = True
            if self.point == "before_projection" and "projection" in seen:
                self.armed_after_commit = "the finish commit (projection in the same transaction)"

    def _on_checkin(self, dbapi_connection: Any, record: Any) -> None:
        record.info.pop("tick_line", None)
        with self.checked_out_lock:
            self.checked_out.discard(record)
        if self.armed_after_commit:
            self.kill(self.point, f"check-in after {self.armed_after_commit}")


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format=f"%(asctime)s {sys.argv[2]} %(name)s %(message)s")
    url, node_id, events = sys.argv[1], sys.argv[2], sys.argv[3]
    options: dict[str, Any] = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    sleeps: dict[str, float] = options.get("sleep_s", {})
    switch = KillSwitch(os.environ.get("HAI_FAULT_KILL_AT") or None, os.environ.get("HAI_FAULT_TASK") or None,
                        os.environ.get("HAI_FAULT_SIGNAL", "SIGKILL"), events, node_id, bool(options.get("trace")))

    def execute(hook_event: Any) -> Any:
        ctx = hook_event.context
        if switch.armed_after_commit and switch.watches(ctx.task_id):  # before the effect, never after
            switch.kill(switch.point, f"the handler called after {switch.armed_after_commit}")
        record_effect(events, Effect(ctx.task_id, ctx.occurrence_id, ctx.attempt, ctx.sequence, node_id, os.getpid()))
        if switch.watches(ctx.task_id):
            switch.fire("in_handler", "in the handler, after its effect")
        pause = sleeps.get(ctx.task_id, 0)
        if pause:
            hook_event.signal.wait(pause)
        return {"node": node_id}

    def returned(hook_event: Any) -> None:
        if switch.watches(hook_event.context.task_id):
            switch.handler_returned = True
            switch.fire("after_handler", f"the handler returned ({hook_event.status})")

    concurrency = options.get("max_concurrency", 4)
    engine = create_engine({"url": url, "pool_size": concurrency + 4,
                            "connect_timeout_ms": options.get("connect_timeout_ms", 10_000)})
    set_clock_offset_from_env(engine)
    switch.install(engine)
    scheduler = Scheduler(engine, SchedulerConfig(node_id=node_id, lease_ms=options.get("lease_ms", 1500),
                                                  tick_interval_ms=options.get("tick_interval_ms", 100),
                                                  max_concurrency=concurrency),
                          hooks={"on_task_execute": execute, "on_task_finish": returned, "on_task_error": returned})
    scheduler.init()
    stop = stop_on_signals((signal.SIGTERM,))
    scheduler.start()
    append_event(events, {"kind": "ready", "node": node_id, "pid": os.getpid()})
    wait_for_stop(stop, options.get("max_seconds", 120))
    # A close that takes this long is a finding: every thread's stack goes to stderr, which
    # stop_nodes() prints when the node does not stop (it waits 60 s).
    faulthandler.dump_traceback_later(40)
    scheduler.close()
    faulthandler.cancel_dump_traceback_later()
    engine.dispose()


if __name__ == "__main__":
    main()
