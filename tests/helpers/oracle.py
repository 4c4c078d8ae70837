"""The reliability oracle: one checker that judges every fault and soak test.

In the spirit of Jepsen's schedule checker: the test
hands over the run's window (DB-time minutes), the tasks it registered and the handlers' own
record of their side effects, and the oracle reads the journal, the slots and the logs and
returns every violation as a precise sentence. Tests assert that the list is empty.

What must hold (docs/semantics.md):

- schedule: for every task and every due minute of the window the journal holds exactly one
  cron occurrence under the deterministic id -- executed, skipped with a reason, or unknown;
  no row for a minute that was not due;
- rows: a skipped row has a reason; ``unknown`` only when an attempt began (and, for an
  idempotent task, only once its stored budget is used); attempts numbered 1..n, matching
  the ``attempt`` column; no execution left running with an expired lease after recovery;
- effects: every side effect has its journal row and its attempt in that row; no attempt ran
  twice; two effects for one occurrence only for an idempotent task whose journal shows
  them (a retry or a takeover); a successful hook attempt left its effect;
- slots: a held slot points at a ``running`` or ``unknown`` execution of its task with the
  same token; at most one such execution per task, and it holds the slot (never two owners);
  no finished execution keeps a slot;
- logs: every terminal row with attempts is ``persisted`` (its log rows match the journal)
  or ``pending`` (settled later by ``repair_log``); no log row without its journal attempt;
- counters: each task's fire-lateness totals (``metric_totals``) are its cron rows' whose first
  owner began attempt 1 and whose first ownership has ended (terminal, unknown, or taken over):
  each counted once, with its lateness, and none that is still its first owner's.

Effects are appended by the handlers themselves, one JSON line per call, to a file opened
with O_APPEND and fsync'ed before the handler returns (``record_effect``): a process killed
right after its effect still leaves the record.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core.cron import cron_occurrence_id, fires_at
from scheduler_core.db import db_now_ms
from scheduler_core.db.tables import executions, logs, metric_totals, slots

MINUTE_MS = 60_000
TERMINAL = ("success", "failed", "interrupted", "unknown", "discarded", "skipped")
HOLDS_SLOT = ("running", "unknown")  # statuses that keep the task's slot


# --- inputs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskSpec:
    """A task as the test registered it."""

    id: str
    cron: str
    idempotent: bool = False
    timezone: str = "UTC"
    tracked: bool = True  # its handler records effects (then every successful attempt left one)


@dataclass(frozen=True)
class Window:
    """The run's DB-time minutes, both ends included (minute starts in unix ms)."""

    first_minute: int
    last_minute: int

    def minutes(self) -> list[int]:
        return list(range(self.first_minute, self.last_minute + 1, MINUTE_MS))

    def __contains__(self, minute: object) -> bool:
        return isinstance(minute, int) and self.first_minute <= minute <= self.last_minute


@dataclass(frozen=True)
class Effect:
    """One handler call, as the handler itself recorded it."""

    task_id: str
    occurrence_id: str
    attempt: int
    sequence: int
    node: str
    pid: int


def record_effect(path: str | Path, effect: Effect) -> None:
    """Append ``effect`` durably (O_APPEND, one write, fsync) before the handler returns."""
    append_event(path, {"kind": "effect", **asdict(effect)})


def append_event(path: str | Path, event: Mapping[str, Any]) -> None:
    """One JSON line, written in one call with O_APPEND and fsync'ed."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(event, sort_keys=True) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """Every event line of a file (a torn last line from a killed writer is ignored)."""
    if not Path(path).exists():
        return []
    found = []
    for line in Path(path).read_text().splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


def read_effects(path: str | Path) -> list[Effect]:
    fields = ("task_id", "occurrence_id", "attempt", "sequence", "node", "pid")
    return [Effect(**{k: e[k] for k in fields}) for e in read_events(path) if e.get("kind") == "effect"]


# --- the database, read once ---------------------------------------------------------------


@dataclass(frozen=True)
class Journal:
    """What the oracle judges: the three tables and the DB time they were read at."""

    executions: list[dict[str, Any]]
    slots: list[dict[str, Any]]
    logs: list[dict[str, Any]]
    now_ms: int
    # task: (occurrences, ms) of fire lateness counted (metric_totals); None: not read, not judged
    lateness: dict[str, tuple[int, int]] | None = None


def _attempts(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        value = json.loads(value)
    return [dict(a) for a in value or ()]


def read_journal(engine: Engine) -> Journal:
    """Read executions, slots and logs in one transaction, with the DB time."""
    with engine.connect() as conn:
        now = int(conn.execute(select(db_now_ms())).scalar_one())
        rows = [dict(r._mapping) for r in conn.execute(select(executions))]
        held = [dict(r._mapping) for r in conn.execute(select(slots))]
        written = [dict(r._mapping) for r in conn.execute(select(logs))]
        t = metric_totals.c
        counted = conn.execute(select(t.scope, t.label, t.value).where(t.metric == "lateness")).all()
        conn.rollback()
    for row in rows:
        row["attempts"] = _attempts(row["attempts"])
    lateness: dict[str, tuple[int, int]] = {}
    for task_id, label, value in counted:
        n, ms = lateness.get(task_id, (0, 0))
        lateness[task_id] = (n, ms + int(value)) if label == "sum" else (n + int(value), ms)
    return Journal(rows, held, written, now, lateness)


def check_database(engine: Engine, window: Window | None, tasks: Sequence[TaskSpec], effects: Iterable[Effect],
                   **options: Any) -> list[str]:
    """Read the database and judge it (see :func:`check` for the options)."""
    return check(read_journal(engine), window, tasks, effects, **options)


# --- the checks ----------------------------------------------------------------------------


def when(minute_ms: int) -> str:
    return f"{time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime(minute_ms / 1000))} ({minute_ms})"


@dataclass
class _Context:
    journal: Journal
    tasks: dict[str, TaskSpec]
    effects: list[Effect]
    settled: bool
    projected: bool
    by_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.by_id = {row["occurrence_id"]: row for row in self.journal.executions}

    def fail(self, text: str) -> None:
        self.problems.append(text)


def check(journal: Journal, window: Window | None, tasks: Sequence[TaskSpec], effects: Iterable[Effect], *,
          settled: bool = True, projected: bool = False) -> list[str]:
    """Every violation of the rules above, as sentences (empty: the run is correct).

    ``settled``: recovery has run, so no execution may be ``running`` past its lease.
    ``projected``: ``repair_log`` has run, so no terminal row may still be ``pending``.
    """
    ctx = _Context(journal, {t.id: t for t in tasks}, list(effects), settled, projected)
    if window is not None:
        for task in tasks:
            _check_schedule(ctx, task, window)
    for row in journal.executions:
        _check_row(ctx, row)
    _check_effects(ctx)
    _check_slots(ctx)
    _check_logs(ctx)
    _check_lateness(ctx)
    return ctx.problems


def _check_schedule(ctx: _Context, task: TaskSpec, window: Window) -> None:
    rows_at: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in ctx.journal.executions:
        if row["task_id"] != task.id or row["trigger"] != "cron":
            continue
        minute = row["scheduled_minute"]
        if minute is None:
            ctx.fail(f"task {task.id}: cron occurrence {row['occurrence_id']} has no scheduled minute")
        elif int(minute) in window:
            rows_at[int(minute)].append(row)
    for minute in window.minutes():
        found = rows_at.pop(minute, [])
        due = fires_at(task.cron, task.timezone, minute)
        if due and not found:
            ctx.fail(f"missed: task {task.id} was due at {when(minute)} and the journal has no row for it")
        if not due:
            for row in found:
                ctx.fail(f"extra: task {task.id} has occurrence {row['occurrence_id']} ({row['status']}) "
                         f"for {when(minute)}, which is not due ({task.cron!r} {task.timezone})")
            continue
        if len(found) > 1:
            ctx.fail(f"extra: task {task.id} has {len(found)} journal rows for {when(minute)}: "
                     + ", ".join(f"{r['occurrence_id']} ({r['status']})" for r in found))
        expected = cron_occurrence_id(task.id, minute)
        for row in found:
            if row["occurrence_id"] != expected:
                ctx.fail(f"task {task.id} at {when(minute)}: occurrence id {row['occurrence_id']} is not the "
                         f"deterministic {expected}")


def _check_row(ctx: _Context, row: dict[str, Any]) -> None:
    occ, status, attempts = row["occurrence_id"], row["status"], row["attempts"]
    name = f"occurrence {occ} of task {row['task_id']}"
    task = ctx.tasks.get(row["task_id"])
    if status == "running":
        lease = row["lease_until"]
        if ctx.settled and (lease is None or int(lease) < ctx.journal.now_ms):
            ctx.fail(f"{name} is stuck running with an expired lease (lease_until {lease}, "
                     f"DB now {ctx.journal.now_ms}) although recovery ran")
    elif status not in TERMINAL:
        ctx.fail(f"{name} has an unknown status {status!r}")
    if status == "skipped" and not row["reason"]:
        ctx.fail(f"{name} is skipped without a reason")
    if status == "skipped" and attempts:
        ctx.fail(f"{name} is skipped but records {len(attempts)} attempt(s)")
    if status == "unknown":
        if not attempts or int(row["attempt"]) < 1:
            ctx.fail(f"{name} is unknown although no attempt began (attempt {row['attempt']})")
        elif task is not None and task.idempotent and int(row["attempt"]) < int(row["max_attempts"]):
            ctx.fail(f"{name} is unknown although its task is idempotent with budget left "
                     f"({row['attempt']} of {row['max_attempts']} attempts used; reason {row['reason']})")
    numbers = [int(a.get("attempt") or 0) for a in attempts]
    if numbers != list(range(1, len(attempts) + 1)):
        ctx.fail(f"{name} records attempts numbered {numbers}, not 1..{len(attempts)}")
    if status != "running" and int(row["attempt"]) != len(attempts):
        ctx.fail(f"{name} says attempt {row['attempt']} but records {len(attempts)} attempt(s)")
    for a in attempts:
        if int(a.get("sequence") or 0) > int(row["sequence"]):
            ctx.fail(f"{name}: attempt {a.get('attempt')} has sequence {a.get('sequence')} beyond the row's "
                     f"{row['sequence']}")
        if status in TERMINAL and a.get("status") is None:
            ctx.fail(f"{name} is {status} but attempt {a.get('attempt')} (node {a.get('node_id')}) was never closed")


def _check_effects(ctx: _Context) -> None:
    per_occurrence: dict[str, list[Effect]] = defaultdict(list)
    for effect in ctx.effects:
        per_occurrence[effect.occurrence_id].append(effect)
        row = ctx.by_id.get(effect.occurrence_id)
        who = f"node {effect.node} (pid {effect.pid})"
        if row is None:
            ctx.fail(f"effect without a journal row: {who} ran task {effect.task_id} for occurrence "
                     f"{effect.occurrence_id} (attempt {effect.attempt})")
            continue
        if row["task_id"] != effect.task_id:
            ctx.fail(f"effect of {who} for occurrence {effect.occurrence_id} names task {effect.task_id}, "
                     f"the journal says {row['task_id']}")
        recorded = [a for a in row["attempts"] if int(a.get("attempt") or 0) == effect.attempt]
        if not recorded:
            ctx.fail(f"effect without a journal attempt: {who} ran attempt {effect.attempt} of occurrence "
                     f"{effect.occurrence_id}, which records attempts "
                     f"{[a.get('attempt') for a in row['attempts']]}")
        elif (recorded[0].get("node_id"), recorded[0].get("sequence")) != (effect.node, effect.sequence):
            ctx.fail(f"effect of {who} for attempt {effect.attempt} (sequence {effect.sequence}) of occurrence "
                     f"{effect.occurrence_id}: the journal gives that attempt to node {recorded[0].get('node_id')} "
                     f"sequence {recorded[0].get('sequence')}")
    for occ, found in per_occurrence.items():
        _check_repeats(ctx, occ, found)
    _check_successes_left_effects(ctx, per_occurrence)


def _check_repeats(ctx: _Context, occ: str, found: list[Effect]) -> None:
    if len(found) < 2:
        return
    task = ctx.tasks.get(found[0].task_id)
    for attempt, count in sorted(Counter(e.attempt for e in found).items()):
        if count > 1:
            ctx.fail(f"double effect: attempt {attempt} of occurrence {occ} ran {count} times ("
                     + ", ".join(f"{e.node}/{e.pid}" for e in found if e.attempt == attempt) + ")")
    if task is None or not task.idempotent:
        ctx.fail(f"double effect: task {found[0].task_id} is not idempotent and occurrence {occ} ran "
                 f"{len(found)} times (" + ", ".join(f"attempt {e.attempt} on {e.node}" for e in found) + ")")
        return
    row = ctx.by_id.get(occ)
    sequences = {e.sequence for e in found}
    if row is not None and len(sequences) > 1 and int(row["sequence"]) < max(sequences):
        ctx.fail(f"occurrence {occ} ran under sequences {sorted(sequences)} but the journal shows no takeover "
                 f"(sequence {row['sequence']})")


def _check_successes_left_effects(ctx: _Context, per_occurrence: Mapping[str, list[Effect]]) -> None:
    for row in ctx.journal.executions:
        task = ctx.tasks.get(row["task_id"])
        if task is None or not task.tracked:
            continue
        done = {e.attempt for e in per_occurrence.get(row["occurrence_id"], [])}
        for a in row["attempts"]:
            if a.get("status") == "success" and int(a.get("attempt") or 0) not in done:
                ctx.fail(f"the journal says attempt {a.get('attempt')} of occurrence {row['occurrence_id']} "
                         f"succeeded on node {a.get('node_id')}, but its handler recorded no effect")


def _check_slots(ctx: _Context) -> None:
    holders: dict[str, str] = {}
    for slot in ctx.journal.slots:
        occ = slot["occurrence_id"]
        if occ is None:
            continue
        holders[slot["task_id"]] = occ
        row = ctx.by_id.get(occ)
        where = f"the slot of task {slot['task_id']}"
        if row is None:
            ctx.fail(f"{where} points at occurrence {occ}, which is not in the journal")
        elif row["task_id"] != slot["task_id"]:
            ctx.fail(f"{where} points at occurrence {occ} of another task ({row['task_id']})")
        elif row["status"] not in HOLDS_SLOT:
            ctx.fail(f"{where} is still held by occurrence {occ}, which is {row['status']} (a finished "
                     "execution keeps the slot)")
        elif row["execution_token"] != slot["execution_token"]:
            ctx.fail(f"{where} holds token {slot['execution_token']} but its execution {occ} has token "
                     f"{row['execution_token']} (two owners)")
    owners: dict[str, list[str]] = defaultdict(list)
    for row in ctx.journal.executions:
        if row["status"] in HOLDS_SLOT:
            owners[row["task_id"]].append(row["occurrence_id"])
    for task_id, occs in owners.items():
        if len(occs) > 1:
            ctx.fail(f"task {task_id} has {len(occs)} executions holding its slot at once: {sorted(occs)}")
        for occ in occs:
            if holders.get(task_id) != occ:
                ctx.fail(f"occurrence {occ} of task {task_id} is {ctx.by_id[occ]['status']} but the slot is "
                         f"held by {holders.get(task_id)}")


def _check_logs(ctx: _Context) -> None:
    written: dict[str, dict[str, Any]] = {r["id"]: r for r in ctx.journal.logs}
    known: set[str] = set()
    for row in ctx.journal.executions:
        occ, persistence, attempts = row["occurrence_id"], row["log_persistence"], row["attempts"]
        known.update(str(a.get("log_id")) for a in attempts)
        if row["status"] == "running" or not attempts:
            if persistence not in (None, "persisted"):
                ctx.fail(f"occurrence {occ} is {row['status']} with {len(attempts)} attempt(s) but its logs are "
                         f"{persistence}")
            continue
        if persistence == "pending":
            if ctx.projected:
                ctx.fail(f"occurrence {occ} ({row['status']}) still has logs pending after repair_log ran")
            continue
        if persistence != "persisted":
            ctx.fail(f"terminal occurrence {occ} ({row['status']}) has log_persistence {persistence!r}, "
                     "neither persisted nor pending")
            continue
        for a in attempts:
            log = written.get(str(a.get("log_id")))
            if log is None:
                ctx.fail(f"occurrence {occ} is persisted but the log row of attempt {a.get('attempt')} "
                         f"({a.get('log_id')}) is missing")
            elif (log["occurrence_id"], log["status"], int(log["attempt"])) != (occ, a.get("status") or "unknown",
                                                                                 int(a.get("attempt") or 0)):
                ctx.fail(f"log row {log['id']} ({log['occurrence_id']} attempt {log['attempt']} {log['status']}) "
                         f"differs from the journal's attempt {a.get('attempt')} ({a.get('status')}) of {occ}")
    for log_id, log in written.items():
        if log_id not in known:
            ctx.fail(f"log row {log_id} (occurrence {log['occurrence_id']}, {log['status']}) has no journal attempt")


def _check_lateness(ctx: _Context) -> None:
    """Each cron occurrence's fire lateness is counted once, when its first ownership ended."""
    counted = ctx.journal.lateness
    if counted is None:
        return
    journaled: dict[str, tuple[int, int]] = {}
    for row in ctx.journal.executions:
        first = next((a for a in row["attempts"] if (a.get("attempt"), a.get("sequence")) == (1, 1)), None)
        ended = row["status"] != "running" or int(row["sequence"]) > 1
        if row["trigger"] != "cron" or row["scheduled_minute"] is None or first is None or not ended:
            continue
        n, ms = journaled.get(row["task_id"], (0, 0))
        journaled[row["task_id"]] = (n + 1, ms + max(0, int(first["started_at"]) - int(row["scheduled_minute"])))
    for task_id in sorted(set(journaled) | set(counted)):
        if journaled.get(task_id, (0, 0)) != counted.get(task_id, (0, 0)):
            ctx.fail(f"task {task_id}: the fire-lateness counter holds (occurrences, ms) "
                     f"{counted.get(task_id, (0, 0))}, the journal's ended first ownerships "
                     f"{journaled.get(task_id, (0, 0))}")
