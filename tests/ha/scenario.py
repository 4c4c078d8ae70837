"""A failover scenario on a real pg_auto_failover formation, judged by the fault suite's oracle.

``FailoverRun`` creates a database on a :class:`tests.ha.cluster.Cluster`, migrates it, registers a
mix of tasks (idempotent and non-idempotent ``hook`` tasks whose handlers record their effects,
and ``api`` tasks against a local :class:`RecordingServer`), starts three scheduler nodes as OS
processes (tests/ha/ha_node.py) on the cluster's multi-host URL, and gives them a DB-clock test
offset (``HAI_TEST_DB_CLOCK_OFFSET_MS``) that puts the first minute of the run a few seconds
ahead. The tasks fire at the run's minutes only (a minute list), so nothing runs before the
window and every minute of it is due for every task.

    run = FailoverRun(cluster, "kill", workdir, lease_ms=8000, minutes=3)
    run.start()
    run.disturb("kill", lambda: kill_and_fail_over(cluster), handlers=8)   # once 8 handlers run
    run.finish()                    # the rest of the window, settled; nodes stopped cleanly
    report = run.judge()            # the oracle's problems and the figures
    print(report.summary())         # run_scenario(run, ["kill"]) does all of this

While the run goes on, an "operator" thread resolves every ``unknown`` execution as somebody who
checked the receiver would (``success`` when the handler's effect or the HTTP request is there,
else ``discarded``), so the task's later minutes are not all ``skipped``; each one is counted first.

No pytest in here: bench/failover.py uses it too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.cron import cron_occurrence_id
from scheduler_core.db import create_engine, db_now_ms, upgrade
from scheduler_core.db.tables import executions, nodes
from scheduler_core.task_policies import RetryPolicy
from scheduler_core.testing import OFFSET_ENV, set_clock_offset
from tests.ha.cluster import Cluster
from tests.helpers.http_server import RecordedRequest, RecordingServer
from tests.helpers.oracle import Journal, TaskSpec, Window, check, read_effects, read_events, read_journal

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MINUTE_MS = 60_000
NODE_IDS = ("ha-node-1", "ha-node-2", "ha-node-3")


@dataclass(frozen=True)
class MixTask:
    """One task of the mix: a hook that records its effect and sleeps, or an HTTP request that
    the receiver answers after ``seconds``."""

    id: str
    kind: str  # "hook" | "api"
    idempotent: bool
    seconds: float


# 12 tasks for 3 nodes x 4 threads: every minute of the run is busy for about 18 s, the longest
# handlers outlasting a failover's outage (~10 s).
MIX: tuple[MixTask, ...] = tuple(
    MixTask(f"{kind}-{'idem' if idempotent else 'plain'}-{seconds}s", kind, idempotent, seconds)
    for kind, durations in (("hook", (4, 8, 18)), ("api", (3, 7, 16)))
    for idempotent in (False, True)
    for seconds in durations)


@dataclass
class Disturbance:
    """What was done to the database in one busy minute, and what it cost."""

    what: str  # "kill", "switchover"
    minute: int  # the run's minute it happened in (DB-time minute start, ms)
    at: float  # time.time() when it was done (the SIGKILL, or the switchover command's start)
    started_before: int  # handlers of that minute already started when it was done
    writable_after_s: float | None = None  # until a primary acknowledged a commit again
    rejoined_after_s: float | None = None  # until the topology was whole again (sync standby)
    old_primary: str = ""
    new_primary: str = ""
    first_handler_after_s: float | None = None  # until the first handler started after it (filled by judge)
    detail: str = ""
    into_minute_s: float = 0.0  # how far into its DB minute it was done
    async_window_s: float | None = None  # switchover: the old primary took writes without its sync standby
    unwritable_s: float | None = None  # how long no primary acknowledged a commit (kill: writable_after_s)


@dataclass
class Report:
    """The oracle's verdict and the figures of one run."""

    name: str
    problems: list[str]
    figures: dict[str, Any]
    disturbances: list[Disturbance]
    logs: dict[str, str]
    log_summary: dict[str, dict[str, int]]
    node_rows: list[dict[str, Any]]  # the nodes table at the end (clock_jump_ms, clock_jump_at, ...)
    executions: list[dict[str, Any]]  # the journal at the end
    starts: list[tuple[float, str, str]]  # (wall time, task, occurrence) of every handler start

    def summary(self) -> str:
        f = self.figures
        lines = [f"[ha] scenario {self.name}: {f['minutes']} minutes x {f['tasks']} tasks, lease {f['lease_ms']} ms",
                 f"[ha]   due {f['due']}, ran {f['ran']} (success {f['success']}, failed {f['failed']}), "
                 f"missed {f['missed']}, caught up {f['caught_up']}, skipped {f['skipped']}, "
                 f"interrupted {f['interrupted']}, unknown {f['unknown_seen']} "
                 f"(handler ran {f['unknown_ran']}, never ran {f['unknown_not_ran']}; "
                 f"reasons {f['unknown_reasons']}), unaccounted {f['unaccounted']}",
                 f"[ha]   takeovers {f['takeovers']}, duplicates of non-idempotent tasks {f['duplicates']}, "
                 f"idempotent occurrences run more than once {f['idempotent_repeats']} "
                 f"(same Idempotency-Key: {f['repeats_share_key']}), "
                 f"receiver: {f['requests']} requests for {f['request_keys']} keys, max {f['max_requests_per_key']}"
                 " per key"]
        for d in self.disturbances:
            first = "none" if d.first_handler_after_s is None else f"{d.first_handler_after_s:.1f} s"
            writable = "-" if d.writable_after_s is None else f"{d.writable_after_s:.1f} s"
            rejoined = "-" if d.rejoined_after_s is None else f"{d.rejoined_after_s:.1f} s"
            lines.append(f"[ha]   {d.what} of {d.old_primary} {d.into_minute_s:.1f} s into minute "
                         f"{(d.minute // MINUTE_MS) % 60} ({d.started_before} handlers running) -> {d.new_primary}: "
                         f"writable after {writable}, whole after {rejoined}; first handler started {first} after it"
                         + (f"; {d.detail}" if d.what == "switchover" else ""))
        lines.append(f"[ha]   minutes that began after the last disturbance was over: {f['undisturbed_minutes']}")
        for node, counts in self.log_summary.items():
            shown = ", ".join(f"{k}: {v}" for k, v in counts.items()) or "nothing at WARNING or above"
            lines.append(f"[ha]   log of {node}: {shown}")
        lines.append(f"[ha]   oracle: {len(self.problems)} problem(s)")
        lines += [f"[ha]     {p}" for p in self.problems[:40]]
        return "\n".join(lines)


def _retry(what: Callable[[], Any], timeout: float = 60) -> Any:
    """Call ``what`` until it does not raise (the database may be between primaries)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return what()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def db_now(engine: Engine) -> int:
    def read() -> int:
        with engine.connect() as conn:
            value = int(conn.execute(select(db_now_ms())).scalar_one())
            conn.rollback()
        return value
    return int(_retry(read))


def minute_list_cron(minutes: list[int]) -> str:
    """A cron expression firing at exactly these minutes (fewer than 60 of them, within an hour
    of each other): the run's window and nothing before it."""
    values = sorted({(m // MINUTE_MS) % 60 for m in minutes})
    assert len(values) == len(minutes), "the window must be shorter than an hour"
    return ",".join(str(v) for v in values) + " * * * *"


class Topology(Protocol):
    """What a run needs of the database topology: tests/ha/cluster.py's Cluster, or a Galera
    cluster's adapter (tests/galera/scenario.py)."""

    def wait_healthy(self, timeout: float = 90) -> Any: ...

    def create_database(self, name: str) -> str: ...

    def node_url(self, url: str, index: int) -> str:
        """The URL scheduler node ``index`` connects with (``url``: create_database's)."""
        ...

    def describe(self) -> str: ...


class FailoverRun:
    """Three scheduler nodes on ``cluster`` with the task mix, over ``minutes`` minutes (the window)."""

    def __init__(self, cluster: Topology, name: str, workdir: Path, *, lease_ms: int = 8_000,
                 minutes: int = 3, lead_s: float = 10.0, mix: tuple[MixTask, ...] = MIX,
                 max_concurrency: int = 4, tick_interval_ms: int = 200, resolve_unknown: bool = True) -> None:
        self.cluster, self.name, self.workdir = cluster, name, workdir
        self.lease_ms, self.window_minutes, self.lead_s = lease_ms, minutes, lead_s
        self.mix, self.max_concurrency, self.tick_interval_ms = mix, max_concurrency, tick_interval_ms
        self.resolve = resolve_unknown
        self.events = workdir / "events.jsonl"
        self.url = ""
        self.engine: Engine | None = None
        self.receiver: RecordingServer | None = None
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: set[str] = set()  # scheduler nodes SIGKILLed on purpose (kill_node), not respawned
        self.log_paths: dict[str, Path] = {}
        self.minutes: list[int] = []
        self.offset_ms = 0
        self.cron = ""
        self.disturbances: list[Disturbance] = []
        self.unknown_seen: dict[str, dict[str, Any]] = {}  # occurrence -> row facts when first seen unknown
        self.resolutions: list[tuple[str, str]] = []
        self.operator_errors: list[str] = []
        self._stop_operator = threading.Event()
        self._operator: threading.Thread | None = None
        self._mono_to_wall = 0.0
        self.timings: dict[str, float] = {}

    # --- set-up ------------------------------------------------------------------------

    def start(self) -> FailoverRun:
        began = time.monotonic()
        if self.workdir.exists():  # evidence of an earlier run of the same scenario
            shutil.rmtree(self.workdir)
        self.workdir.mkdir(parents=True)
        self.cluster.wait_healthy()
        self.url = self.cluster.create_database(f"hai_fo_{self.name.replace('-', '_')}_{uuid.uuid4().hex[:6]}")
        self.engine = create_engine({"url": self.url, "pool_size": 12, "connect_timeout_ms": 3000})
        upgrade(self.engine)
        self.receiver = RecordingServer()
        self._mono_to_wall = time.time() - time.monotonic()
        # The test offset: the first minute of the run begins lead_s from now on the nodes' DB clock.
        now = db_now(self.engine)
        target = now + int(self.lead_s * 1000)
        self.offset_ms = (-target) % MINUTE_MS
        set_clock_offset(self.engine, self.offset_ms)
        first = target + self.offset_ms
        self.minutes = [first + i * MINUTE_MS for i in range(self.window_minutes)]
        self.cron = minute_list_cron(self.minutes)
        self._register()
        self._spawn_nodes()
        self._operator = threading.Thread(target=self._operate, name="ha-operator", daemon=True)
        self._operator.start()
        self.timings["setup_s"] = time.monotonic() - began
        late = db_now(self.engine) - self.minutes[0]
        if late > 0:
            print(f"[ha] warning: the nodes were ready {late / 1000:.1f} s after the first minute began", flush=True)
        return self

    def _register(self) -> None:
        assert self.engine is not None and self.receiver is not None
        admin = Scheduler(self.engine, SchedulerConfig(node_id="ha-admin", max_concurrency=1))
        admin.init()
        try:
            for task in self.mix:
                handler = None
                if task.kind == "api":
                    handler = {"kind": "api", "method": "POST", "timeout": 30_000,
                               "url": self.receiver.url(f"slow/{task.seconds}?task={task.id}")}
                admin.register(TaskDefinition(
                    id=task.id, name=task.id, cron=self.cron, timezone="UTC", idempotent=task.idempotent,
                    retry=RetryPolicy(max_attempts=3) if task.idempotent else None, handler=handler))
        finally:
            admin.close()

    def _spawn_nodes(self) -> None:
        for node_id in NODE_IDS:
            self.log_paths[node_id] = self.workdir / f"{node_id}.log"
            self._spawn(node_id)
        self._wait_ready(set(NODE_IDS), 0)

    def _spawn(self, node_id: str) -> None:
        options = {"lease_ms": self.lease_ms, "tick_interval_ms": self.tick_interval_ms,
                   "max_concurrency": self.max_concurrency, "connect_timeout_ms": 3000,
                   "sleep_s": {t.id: t.seconds for t in self.mix if t.kind == "hook"}}
        env = {**os.environ, "PYTHONPATH": str(ROOT), OFFSET_ENV: str(self.offset_ms)}
        url = self.cluster.node_url(self.url, NODE_IDS.index(node_id))
        with self.log_paths[node_id].open("ab") as out:
            self.procs[node_id] = subprocess.Popen(
                [sys.executable, str(HERE / "ha_node.py"), url, node_id, str(self.events), json.dumps(options)],
                stdout=out, stderr=subprocess.STDOUT, env=env)

    def _wait_ready(self, wanted: set[str], readies_before: int) -> None:
        deadline = time.monotonic() + 90
        while True:
            events = [e for e in read_events(self.events) if e.get("kind") == "ready"]
            ready = {e["node"] for e in events[readies_before:]}
            if ready >= wanted:
                return
            for node_id, proc in self.procs.items():
                if proc.poll() is not None:
                    raise AssertionError(f"{node_id} exited ({proc.returncode}) before it was ready:\n"
                                         f"{self.log_tail(node_id)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"nodes not ready after 90 s: only {sorted(ready)}")
            time.sleep(0.1)

    def kill_node(self, node_id: str) -> float:
        """SIGKILL scheduler node ``node_id`` (a machine gone); returns time.time() of it."""
        at = time.time()
        self.procs[node_id].kill()
        self.procs[node_id].wait()
        self.killed.add(node_id)
        return at

    def respawn(self, node_id: str) -> None:
        """Start a killed node again under the same node id (its machine is back), until ready."""
        readies = sum(1 for e in read_events(self.events) if e.get("kind") == "ready")
        self._spawn(node_id)
        self.killed.discard(node_id)
        self._wait_ready({node_id}, readies)

    # --- during the run ----------------------------------------------------------------

    def occurrences(self, minute: int) -> set[str]:
        return {cron_occurrence_id(t.id, minute) for t in self.mix}

    def started(self, minute: int) -> int:
        """Handlers of that minute started so far (hook effects and HTTP requests)."""
        assert self.receiver is not None
        wanted = self.occurrences(minute)
        hooks = {e["occurrence_id"] for e in read_events(self.events)
                 if e.get("kind") == "effect" and e["occurrence_id"] in wanted}
        calls = {r.header("Idempotency-Key") for r in list(self.receiver.requests)} & wanted
        return len(hooks | calls)

    def handler_starts(self) -> list[tuple[float, str, str]]:
        """(wall time, task id, occurrence id) of every handler start so far: hook effects and
        HTTP requests."""
        assert self.receiver is not None
        starts = [(float(e["at"]), str(e["task_id"]), str(e["occurrence_id"])) for e in read_events(self.events)
                  if e.get("kind") == "effect"]
        starts += [(r.received_at + self._mono_to_wall, r.header("X-Scheduler-Task") or "",
                    r.header("Idempotency-Key") or "") for r in list(self.receiver.requests)]
        return sorted(starts)

    def running_now(self) -> int:
        """Handlers running now, by their start and their task's duration (a handler cancelled
        early still counts: an upper bound)."""
        seconds = {t.id: t.seconds for t in self.mix}
        now = time.time()
        return sum(1 for at, task, _ in self.handler_starts() if at + seconds.get(task, 0) > now + 0.5)

    def wait_busy(self, handlers: int, timeout: float = 90, settle_s: float = 1.0) -> int:
        """Wait until at least ``handlers`` handlers are running (then ``settle_s`` more)."""
        deadline = time.monotonic() + timeout
        while self.running_now() < handlers:
            self.check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"only {self.running_now()} handlers running after {timeout} s "
                                     f"(wanted {handlers})")
            time.sleep(0.1)
        time.sleep(settle_s)
        return self.running_now()

    def disturb(self, what: str, action: Callable[[], Disturbance], handlers: int = 8,
                timeout: float = 90) -> Disturbance:
        """Once ``handlers`` handlers run: ``action`` (a kill and failover, a switchover...)."""
        self.wait_busy(handlers, timeout)
        return self.disturb_at(0, what, action)

    def disturb_at(self, db_ms: int, what: str, action: Callable[[], Disturbance]) -> Disturbance:
        """When the nodes' DB clock reads ``db_ms`` (by this host's clock): ``action``."""
        while (left := (db_ms - self.db_ms(time.time())) / 1000) > 0:
            self.check_alive()
            time.sleep(min(left, 0.2))
        running = self.running_now()
        disturbance = action()
        disturbance.started_before, disturbance.what = running, what
        disturbance.minute = self.db_ms(disturbance.at) // MINUTE_MS * MINUTE_MS
        disturbance.into_minute_s = (self.db_ms(disturbance.at) - disturbance.minute) / 1000
        self.disturbances.append(disturbance)
        self.check_alive()
        return disturbance

    def db_ms(self, wall: float) -> int:
        """The nodes' DB time at a wall-clock moment (the first primary's clock plus the test offset)."""
        return int(wall * 1000) + self.offset_ms

    def check_alive(self) -> None:
        for node_id, proc in self.procs.items():
            if node_id not in self.killed and proc.poll() is not None:
                raise AssertionError(f"{node_id} exited ({proc.returncode}) during the run:\n{self.log_tail(node_id)}")

    def _operate(self) -> None:
        """Resolve each unknown execution as an operator who checked the receiver would."""
        assert self.engine is not None
        operator = None
        while not self._stop_operator.wait(1.0):
            try:
                if operator is None:
                    operator = Scheduler(self.engine, SchedulerConfig(node_id="ha-operator", max_concurrency=1))
                    operator.init()
                with self.engine.connect() as conn:
                    rows = [dict(r._mapping) for r in conn.execute(
                        select(executions).where(executions.c.status == "unknown"))]
                    conn.rollback()
                for row in rows:
                    occ = row["occurrence_id"]
                    ran = self.handler_ran(occ)
                    self.unknown_seen.setdefault(occ, {"task": row["task_id"], "reason": row["reason"], "ran": ran,
                                                       "sequence": row["sequence"], "attempt": row["attempt"]})
                    if not self.resolve:
                        continue
                    verdict = "success" if ran else "discarded"
                    operator.execution.resolve_unknown(occ, verdict, int(row["updated_at"]), "ha-operator",
                                                       "checked the receiver / the effects file")
                    self.resolutions.append((occ, verdict))
            except Exception as exc:  # the database between primaries: next round
                self.operator_errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
        if operator is not None:
            with contextlib.suppress(Exception):
                operator.close()

    def handler_ran(self, occurrence_id: str) -> bool:
        assert self.receiver is not None
        if any(e.get("kind") == "effect" and e["occurrence_id"] == occurrence_id for e in read_events(self.events)):
            return True
        return any(r.header("Idempotency-Key") == occurrence_id for r in list(self.receiver.requests))

    # --- the end -----------------------------------------------------------------------

    def finish(self, timeout: float = 240) -> None:
        """Wait until every minute of the window is journaled and settled, then stop the nodes."""
        assert self.engine is not None
        last = self.minutes[-1]
        deadline = time.monotonic() + (last - db_now(self.engine)) / 1000 + timeout
        wanted = {(t.id, m) for t in self.mix for m in self.minutes}

        def settled() -> bool:
            with self.engine.connect() as conn:  # type: ignore[union-attr]
                rows = list(conn.execute(select(executions.c.task_id, executions.c.scheduled_minute,
                                                executions.c.status)))
                conn.rollback()
            seen = {(r.task_id, int(r.scheduled_minute)) for r in rows if r.scheduled_minute is not None}
            busy = [r for r in rows if r.status in ("running", "queued")]
            return wanted <= seen and not busy

        while True:
            self.check_alive()
            with contextlib.suppress(Exception):
                if db_now(self.engine) >= last and settled() and not self._unresolved():
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"the run did not settle in time; journal: {self.journal_digest()}")
            time.sleep(0.5)
        self.stop_nodes()

    def _unresolved(self) -> bool:
        if not self.resolve:
            return False
        assert self.engine is not None
        with self.engine.connect() as conn:
            count = conn.execute(select(executions.c.occurrence_id).where(executions.c.status == "unknown")).all()
            conn.rollback()
        return bool(count)

    def stop_nodes(self, timeout: float = 90) -> None:
        self._stop_operator.set()
        if self._operator is not None:
            self._operator.join(timeout=30)
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        failures = []
        for node_id, proc in self.procs.items():
            if node_id in self.killed:
                continue
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                failures.append(f"{node_id} did not stop on SIGTERM within {timeout} s:\n{self.log_tail(node_id)}")
                continue
            if proc.returncode != 0:
                failures.append(f"{node_id} exited with {proc.returncode}:\n{self.log_tail(node_id)}")
        assert not failures, "\n".join(failures)

    def close(self) -> None:
        """Whatever is left: nodes (SIGKILL), the receiver, the engine. Safe after a failure."""
        self._stop_operator.set()
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if self.receiver is not None:
            self.receiver.close()
        if self.engine is not None:
            self.engine.dispose()

    def log_tail(self, node_id: str, lines: int = 60) -> str:
        path = self.log_paths.get(node_id)
        if path is None or not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def journal_digest(self) -> str:
        assert self.engine is not None
        try:
            with self.engine.connect() as conn:
                rows = list(conn.execute(select(executions.c.task_id, executions.c.scheduled_minute,
                                                executions.c.status, executions.c.reason)))
                conn.rollback()
        except Exception as exc:
            return f"(unreadable: {exc})"
        return ", ".join(f"{r.task_id}@{r.scheduled_minute}:{r.status}/{r.reason}" for r in rows)

    # --- judging -----------------------------------------------------------------------

    def node_rows(self) -> list[dict[str, Any]]:
        assert self.engine is not None

        def read() -> list[dict[str, Any]]:
            with self.engine.connect() as conn:  # type: ignore[union-attr]
                rows = [dict(r._mapping) for r in conn.execute(select(nodes))]
                conn.rollback()
            return rows
        return list(_retry(read))

    def judge(self) -> Report:
        assert self.engine is not None and self.receiver is not None
        engine = self.engine
        journal: Journal = _retry(lambda: read_journal(engine))
        window = Window(self.minutes[0], self.minutes[-1])
        specs = [TaskSpec(t.id, self.cron, idempotent=t.idempotent, tracked=t.kind == "hook") for t in self.mix]
        effect_events = [e for e in read_events(self.events) if e.get("kind") == "effect"]
        effects = read_effects(self.events)
        problems = check(journal, window, specs, effects)
        by_id = {r["occurrence_id"]: r for r in journal.executions}
        # A missed row with a reason is an accounted-for occurrence (the oracle predates the status).
        accepted = {f"occurrence {r['occurrence_id']} of task {r['task_id']} has an unknown status 'missed'"
                    for r in journal.executions if r["status"] == "missed" and r["reason"]}
        problems = [p for p in problems if p not in accepted]
        requests = list(self.receiver.requests)
        problems += self._check_requests(requests, by_id)
        figures = self._figures(journal, window, effect_events, requests, problems)
        for d in self.disturbances:
            after = [at for at, _, _ in self.handler_starts() if at > d.at]
            d.first_handler_after_s = (min(after) - d.at) if after else None
        calm = max((self.db_ms(d.at + (d.rejoined_after_s or 0)) for d in self.disturbances), default=0)
        figures["undisturbed_minutes"] = sum(1 for m in self.minutes if m > calm)
        logs = {n: p.read_text(errors="replace") if p.exists() else "" for n, p in self.log_paths.items()}
        return Report(self.name, problems, figures, self.disturbances, logs,
                      {n: summarise_log(text) for n, text in logs.items()}, self.node_rows(), journal.executions,
                      self.handler_starts())

    def _check_requests(self, requests: list[RecordedRequest], by_id: dict[str, dict[str, Any]]) -> list[str]:
        """The receiver's side of the oracle, for the api tasks (their effects are HTTP requests)."""
        problems: list[str] = []
        tasks = {t.id: t for t in self.mix}
        per_key: dict[str, list[RecordedRequest]] = defaultdict(list)
        for request in requests:
            key, task_id = request.header("Idempotency-Key"), request.header("X-Scheduler-Task")
            attempt, sequence = request.header("X-Scheduler-Attempt"), request.header("X-Scheduler-Sequence")
            if key is None or task_id not in tasks:
                problems.append(f"receiver: a request without a known task or Idempotency-Key: {request.path} "
                                f"{request.headers}")
                continue
            per_key[key].append(request)
            row = by_id.get(key)
            if row is None:
                problems.append(f"receiver: request for {task_id} with Idempotency-Key {key} has no journal row")
                continue
            if row["task_id"] != task_id:
                problems.append(f"receiver: Idempotency-Key {key} names task {task_id}, the journal {row['task_id']}")
            if row["trigger"] == "cron" and row["scheduled_minute"] is not None and \
                    key != cron_occurrence_id(task_id, int(row["scheduled_minute"])):
                problems.append(f"receiver: Idempotency-Key {key} is not the deterministic id of {task_id} at "
                                f"{row['scheduled_minute']}")
            recorded = [a for a in row["attempts"] if str(a.get("attempt")) == str(attempt)]
            if not recorded:
                problems.append(f"receiver: request of attempt {attempt} of {key} ({task_id}), which the journal "
                                f"does not record (attempts {[a.get('attempt') for a in row['attempts']]})")
            elif str(recorded[0].get("sequence")) != str(sequence):
                problems.append(f"receiver: attempt {attempt} of {key} was sent under sequence {sequence}, the "
                                f"journal says {recorded[0].get('sequence')}")
        for key, found in per_key.items():
            task = tasks[found[0].header("X-Scheduler-Task") or ""]
            attempts = Counter(r.header("X-Scheduler-Attempt") for r in found)
            for attempt, count in attempts.items():
                if count > 1:
                    problems.append(f"receiver: attempt {attempt} of {key} ({task.id}) was sent {count} times")
            if len(found) > 1 and not task.idempotent:
                problems.append(f"double effect: task {task.id} is not idempotent and the receiver got "
                                f"{len(found)} requests for occurrence {key}")
        for row in by_id.values():
            api = tasks.get(row["task_id"])
            if api is None or api.kind != "api":
                continue
            sent = {r.header("X-Scheduler-Attempt") for r in per_key.get(row["occurrence_id"], [])}
            for a in row["attempts"]:
                if a.get("status") == "success" and str(a.get("attempt")) not in sent:
                    problems.append(f"the journal says attempt {a.get('attempt')} of {row['occurrence_id']} "
                                    f"({api.id}) succeeded, but the receiver got no such request")
        return problems

    def _figures(self, journal: Journal, window: Window, effect_events: list[dict[str, Any]],
                 requests: list[RecordedRequest], problems: list[str]) -> dict[str, Any]:
        ids = {t.id for t in self.mix}
        rows = [r for r in journal.executions if r["task_id"] in ids and r["scheduled_minute"] is not None
                and int(r["scheduled_minute"]) in window]
        status = Counter(r["status"] for r in rows)
        runs: dict[str, int] = Counter(e["occurrence_id"] for e in effect_events)
        keys: dict[str, int] = Counter(r.header("Idempotency-Key") or "" for r in requests)
        runs.update(keys)
        idempotent = {t.id: t.idempotent for t in self.mix}
        duplicates = sum(1 for r in rows if not idempotent[r["task_id"]] and runs.get(r["occurrence_id"], 0) > 1)
        repeats = [r for r in rows if idempotent[r["task_id"]] and runs.get(r["occurrence_id"], 0) > 1]
        # A second request of an idempotent api occurrence reuses the key, by construction of the
        # count: a different key would be a second occurrence, which the oracle reports as extra.
        due = len(self.mix) * len(self.minutes)
        unknown_now = {r["occurrence_id"]: r for r in rows if r["status"] == "unknown"}
        seen = dict(self.unknown_seen)
        for occ, r in unknown_now.items():
            seen.setdefault(occ, {"task": r["task_id"], "reason": r["reason"], "ran": self.handler_ran(occ)})
        in_window = {occ: s for occ, s in seen.items() if occ in {r["occurrence_id"] for r in rows}}
        unaccounted = sum(1 for p in problems if p.startswith("missed:")) + sum(
            1 for r in rows if r["status"] in ("running", "queued"))
        return {
            "minutes": len(self.minutes), "tasks": len(self.mix), "lease_ms": self.lease_ms, "due": due,
            "rows": len(rows), "ran": sum(1 for r in rows if r["attempts"]),
            "success": status["success"], "failed": status["failed"], "missed": status["missed"],
            "caught_up": sum(1 for r in journal.executions if r["trigger"] == "catchup"),
            "skipped": status["skipped"], "interrupted": status["interrupted"],
            "unknown_seen": len(in_window), "unknown_ran": sum(1 for s in in_window.values() if s["ran"]),
            "unknown_not_ran": sum(1 for s in in_window.values() if not s["ran"]),
            "unknown_reasons": dict(Counter(str(s["reason"]) for s in in_window.values())),
            "resolved": dict(Counter(v for o, v in self.resolutions if o in in_window)),
            "statuses": dict(status), "reasons": dict(Counter(f"{r['status']}/{r['reason']}" for r in rows
                                                             if r["reason"])),
            "takeovers": sum(1 for r in rows if int(r["sequence"]) > 1),
            "duplicates": duplicates, "idempotent_repeats": len(repeats),
            "repeats_share_key": all(r["occurrence_id"] in keys or r["occurrence_id"] in runs for r in repeats),
            "requests": len(requests), "request_keys": len(keys),
            "max_requests_per_key": max(keys.values(), default=0),
            "unaccounted": unaccounted, "problems": len(problems),
        }


_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (?P<node>\S+) (?P<level>[A-Z]+) (?P<name>\S+) "
                       r"(?P<message>.*)$")


def summarise_log(text: str) -> dict[str, int]:
    """A node log's records by level and the first words of the message, plus tracebacks."""
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        match = _LOG_LINE.match(line)
        if match:
            words = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}|\d+", "#", match["message"])[:70]
            counts[f"{match['level']} {match['name']}: {words}"] += 1
        elif line.startswith("Traceback"):
            counts["tracebacks"] += 1
    return dict(counts.most_common())


# --- disturbances ----------------------------------------------------------------------


def kill_and_fail_over(cluster: Cluster) -> Disturbance:
    """SIGKILL the primary's postmaster and pg_autoctl (a machine gone): a certain failover;
    wait until the old primary is back as a synchronous standby."""
    old = cluster.primary()
    at = cluster.kill_primary(with_keeper=True)
    recovery = cluster.wait_failover(old)
    return Disturbance("kill", 0, at, 0, recovery.writable_after_s, recovery.rejoined_after_s, recovery.old_primary,
                       recovery.new_primary, detail="; ".join(recovery.events), unwritable_s=recovery.writable_after_s)


def switch_over(cluster: Cluster) -> Disturbance:
    """A planned ``pg_autoctl perform switchover``. It also reads what the old primary's
    pg_autoctl did meanwhile: when the monitor sends it to ``wait_primary`` (synchronous
    replication off) instead of ``draining`` -- hapostgres/pg_auto_failover#774, in Debian's
    pg_auto_failover 2.0 -- it keeps acknowledging commits until its demotion, and pg_rewind
    discards them. ``async_window_s`` says for how long (None: the switchover was clean)."""
    old = cluster.primary()
    before = old.run_log.stat().st_size if old.run_log.exists() else 0
    at = time.time()
    switch = cluster.switchover()
    with old.run_log.open("rb") as log:
        log.seek(before)
        appended = log.read().decode("utf-8", "replace")
    disturbance = Disturbance("switchover", 0, at, 0, switch.writable_after_s, switch.duration_s, switch.old_primary,
                              switch.new_primary, detail=f"no writable primary for {switch.unwritable_s:.2f} s",
                              unwritable_s=switch.unwritable_s)
    disturbance.async_window_s = async_window(appended)
    if disturbance.async_window_s is not None:
        disturbance.detail += (f"; {old.name} was a primary without synchronous replication (wait_primary) for "
                               f"{disturbance.async_window_s:.0f} s before its demotion")
    return disturbance


_FSM = re.compile(r'^(\d\d):(\d\d):(\d\d) \d+ INFO  FSM transition from "(?P<from>\w+)" to "(?P<to>\w+)"')


def async_window(keeper_log: str) -> float | None:
    """Seconds a primary spent in ``wait_primary`` (synchronous replication off, still taking
    writes) before it was demoted, from its pg_autoctl log (None: it never went there)."""
    entered = left = None
    for line in keeper_log.splitlines():
        match = _FSM.match(line)
        if not match:
            continue
        seconds = int(match[1]) * 3600 + int(match[2]) * 60 + int(match[3])
        if match["from"] == "primary" and match["to"] == "wait_primary":
            entered = seconds
        elif entered is not None and match["from"] == "wait_primary" and left is None:
            left = seconds
    if entered is None:
        return None
    return float(((left if left is not None else entered) - entered) % 86_400)


def save_evidence(run: FailoverRun, report: Report, directory: Path) -> Path:
    """Write the journal, the nodes table, the receiver's requests and the report under
    ``directory`` (the run's workdir already holds the node logs and the events file)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "journal.json").write_text(json.dumps(report.executions, default=str, indent=1))
    (directory / "nodes.json").write_text(json.dumps(report.node_rows, default=str, indent=1))
    assert run.receiver is not None
    (directory / "requests.json").write_text(json.dumps(
        [{"path": r.path, "headers": r.headers, "at": r.received_at + run._mono_to_wall, "outcome": r.outcome}
         for r in run.receiver.requests], indent=1))
    (directory / "report.txt").write_text(report.summary() + "\n\nfigures: " + json.dumps(report.figures, indent=1)
                                          + "\n\nproblems:\n" + "\n".join(report.problems)
                                          + "\n\ndisturbances:\n" + "\n".join(str(d) for d in report.disturbances)
                                          + "\n\ncluster:\n" + run.cluster.describe())
    return directory


def run_scenario(run: FailoverRun, actions: list[str], first_busy: int = 8, then_busy: int = 2) -> Report:
    """Start ``run``; do each action ("kill": SIGKILL of the primary and a certain failover,
    waiting for the old primary to rejoin as a synchronous standby; "switchover": a planned one)
    while handlers run -- the first once ``first_busy`` run in the first minute, each later one
    once ``then_busy`` run again; then finish and judge the run. The caller closes the run."""
    run.start()
    cluster = run.cluster
    assert isinstance(cluster, Cluster), "run_scenario's actions are pg_auto_failover's"
    for index, action in enumerate(actions):
        do = {"kill": lambda: kill_and_fail_over(cluster), "switchover": lambda: switch_over(cluster)}[action]
        run.disturb(action, do, handlers=first_busy if index == 0 else then_busy)
    run.finish()
    return run.judge()
