"""Task definitions, executions, attempts and logs: plain frozen values, and ``validate_task``
(every entry point validates a definition through it, with the checks of ``validation``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from scheduler_core.access import DEFAULT_TEAM
from scheduler_core.cron import validate_cron, validate_timezone
from scheduler_core.cron.expressions import MAX_CRON_LENGTH
from scheduler_core.cron.jitter import check_jitter, jitter_delay
from scheduler_core.errors import ConfigError
from scheduler_core.masking import mask_values, masked_handler
from scheduler_core.statuses import TERMINAL_STATUSES, AttemptStatus, ExecutionStatus, LogPersistenceStatus, Trigger
from scheduler_core.task_policies import Calendar, CatchupPolicy, OverlapPolicy, Pause, RetryPolicy
from scheduler_core.task_schema import Section, TaskField, Widget, declare, task_fields
from scheduler_core.validation import (
    GROUP_MAX,
    ID_MAX,
    TEAM_MAX,
    check_bool,
    check_group,
    check_id,
    check_json,
    check_link,
    check_optional_int,
    check_optional_text,
    check_params,
    check_team,
    check_text,
)

NAME_MAX = 255
RUNBOOK_URL_MAX = 2048
OWNER_MAX = 255
DESCRIPTION_MAX = 10_000
PAUSE_ON_FAILURE_MAX = 100
MAX_RUNS_MAX = 1_000_000
JITTER_MAX_MS = 12 * 3_600_000


@dataclass(frozen=True)
class TaskDefinition:
    """A scheduled task. Each field carries its ``TaskField`` declaration (``task_schema``), from which
    the store's columns, the task file, the update path, the form and the API are derived; the
    stored fields are filled in by the repository."""

    id: str = declare(TaskField(
        "Id", Widget.ID, Section.TASK, "Unique, 1 to 128 characters; it cannot be changed later.", updatable=False,
        max_length=ID_MAX, invalid="x" * (ID_MAX + 1)))
    name: str = declare(TaskField("Name", Widget.LINE, Section.TASK, "Shown to operators.", max_length=NAME_MAX,
                                  example="Nightly export (renamed)", invalid="line one\nline two"))
    cron: str = declare(TaskField(
        "Cron expression", Widget.CRON, Section.SCHEDULE,
        "Five fields: minute hour day-of-month month day-of-week (e.g. 30 2 * * 1-5), or @daily, @hourly ...",
        max_length=MAX_CRON_LENGTH, example="30 2 * * 1-5", invalid="61 * * * *"))  # matched per minute on the DB clock
    team: str = declare(TaskField(  # docs/teams.md; moving a task needs admin in both teams
        "Team", Widget.TEAM, Section.TASK, "Its members see, run and change it, and its history.",
        max_length=TEAM_MAX, example="ops", invalid="Not a team"), DEFAULT_TEAM)
    description: str | None = declare(TaskField("Description", Widget.TEXT, Section.TASK, max_length=DESCRIPTION_MAX,
                                                example="Two lines\nof description",
                                                invalid="x" * (DESCRIPTION_MAX + 1)), None)
    timezone: str = declare(TaskField(
        "Time zone", Widget.ZONE, Section.SCHEDULE,
        "The IANA zone the schedule is read in (e.g. Europe/Berlin); empty means UTC.", max_length=255,
        example="Europe/Berlin", invalid="Mars/Olympus_Mons"), "UTC")  # never the node's TZ
    enabled: bool = declare(TaskField("Enabled (runs on its schedule)", Widget.CHECK, Section.SCHEDULE,
                                      example=False), True)
    calendar: Calendar | None = declare(TaskField(  # None: every minute the cron names is due
        "Active window and exclusions", Widget.CALENDAR, Section.SCHEDULE,
        "When the schedule may fire at all: not before the window's start, not from its end on, and never on an "
        "excluded date (YYYY-MM-DD) or at a minute an excluded cron expression names (e.g. * * * * 6,0 for "
        "weekends), read in the task's time zone. An excluded minute is not due: it leaves no journal row.",
        example={"active_from_ms": 1_767_225_600_000, "active_until_ms": 1_798_761_600_000,
                 "exclude": ["2026-12-25", "* * * * 6,0"]},
        invalid={"active_from_ms": 1_798_761_600_000, "active_until_ms": 1_767_225_600_000, "exclude": []}), None)
    delete_after_run: bool = declare(TaskField(  # delete after the first success (matching revision)
        "Delete after its first successful run", Widget.CHECK, Section.EXECUTION, example=True), False)
    idempotent: bool = declare(TaskField(  # only then: takeover after a dead owner, and retries
        "Idempotent (safe to run twice: retries and takeover after a lost node)", Widget.CHECK, Section.EXECUTION,
        example=True), False)
    retry: RetryPolicy | None = declare(TaskField(  # None = one attempt
        "Retry", Widget.RETRY, Section.EXECUTION, "1 to 100 attempts, counting the first; more than 1 only retries "
        "idempotent tasks. The delays are comma-separated milliseconds; the last one repeats.",
        example={"max_attempts": 3, "backoff_ms": [1000, 5000]},
        invalid={"max_attempts": 101, "backoff_ms": []}), None)
    handler: Mapping[str, Any] | None = declare(TaskField(  # {"kind": "hook" | "api" | ...}; None = host hook
        "Handler", Widget.HANDLER, Section.TASK, secret=True,
        example={"kind": "api", "url": "http://127.0.0.1:9/hook", "method": "PUT", "headers": {"X-Team": "ops"},
                 "timeout": 5000},
        invalid={"kind": "api", "url": "ftp://127.0.0.1/hook", "method": "POST", "headers": {}}), None)
    params: Mapping[str, Any] | None = declare(TaskField(  # JSON object handed to the handler
        "Params (JSON object)", Widget.JSON, Section.EXECUTION,
        "Handed to the handler. Secret values show as ***; leave *** to keep the stored value.", secret=True,
        example={"table": "orders", "limit": 5},
        invalid={"blob": "x" * (64 * 1024)}), None)
    node_group: str | None = declare(TaskField(  # None: on any node able to run it
        "Node group", Widget.GROUP, Section.ROUTING,
        "Runs only on nodes started in this group (--group); empty: on any node able to run it.",
        max_length=GROUP_MAX, example="batch", invalid="g" * (GROUP_MAX + 1)), None)
    catchup: CatchupPolicy | None = declare(TaskField(  # None: occurrences missed during downtime are journaled only
        "Catch-up after downtime", Widget.CATCHUP, Section.ROUTING,
        "What a node does with occurrences nobody ran while the cluster was down, and how far back it looks.",
        example={"policy": "latest", "window_ms": 600_000},
        invalid={"policy": "latest", "window_ms": 7 * 86_400_000 + 1}), None)
    overlap: OverlapPolicy | None = declare(TaskField(  # None: skip, an occurrence whose slot is held is skipped
        "When a run is still going", Widget.OVERLAP, Section.EXECUTION,
        "What a cron occurrence does while the task's previous run still holds its slot: skip it; buffer_one (wait "
        "for the slot, at most one waiting); buffer_all (each waits its turn, up to the limit); cancel_other (wait, "
        "and ask the running one to stop); terminate_other (the same, killing its process: python, js and command "
        "handlers only). Never two runs of the task at once.",
        example={"policy": "buffer_all", "buffer_limit": 5},
        invalid={"policy": "buffer_all", "buffer_limit": 1001}), None)
    pause_on_failure: int | None = declare(TaskField(  # None: never paused by failures
        "Pause after this many failures in a row", Widget.COUNT, Section.EXECUTION,
        "Pause the task when this many of its scheduled runs in a row have failed (retries spent; manual runs do "
        "not count): reason 'failed N times in a row', an alert task.paused. Empty: never.",
        max_length=PAUSE_ON_FAILURE_MAX, example=3, invalid=0), None)
    max_runs: int | None = declare(TaskField(  # None: no limit
        "Disable after this many scheduled runs", Widget.COUNT, Section.SCHEDULE,
        "The task disables itself when this many of its scheduled runs (cron and catch-up; manual runs do not "
        "count) have started; the last one ends as its handler says. Enabling it again starts a new count. "
        "Empty: no limit.",
        max_length=MAX_RUNS_MAX, example=5, invalid=MAX_RUNS_MAX + 1), None)
    jitter_ms: int | None = declare(TaskField(  # None: each occurrence starts at its minute
        "Jitter (ms)", Widget.COUNT, Section.SCHEDULE,
        "Delay each scheduled occurrence by up to this many milliseconds, the same amount on every node and "
        "for a re-run (derived from its occurrence id), so that many tasks on one minute do not start at "
        "once. At most half the shortest time between two of its fire times, and 12 hours. Empty: none.",
        max_length=JITTER_MAX_MS, example=30_000, invalid=JITTER_MAX_MS + 1), None)
    runbook_url: str | None = declare(TaskField(  # shown where an operator decides about this task's runs
        "Runbook URL", Widget.LINE, Section.TASK, "Where an operator reads what to do when a run fails or its outcome "
        "is unknown (http or https); linked from the task's page.", max_length=RUNBOOK_URL_MAX,
        example="https://wiki.example.com/runbooks/nightly-export",
        invalid="javascript:alert(1)"), None)
    owner: str | None = declare(TaskField(  # shown where an operator decides about this task's runs
        "Owner", Widget.LINE, Section.TASK, "The team or person operators contact about this task's runs "
        "(one line, e.g. team-billing (billing-oncall@example.com)); shown on the task's page.", max_length=OWNER_MAX,
        example="team-billing (billing-oncall@example.com)", invalid="line one\nline two"), None)
    revision: int = declare(TaskField("Revision", Widget.STORED, Section.STORED, updatable=False), 0)  # every change
    paused: Pause | None = declare(TaskField(  # set by Scheduler.pause, cleared by resume
        "Paused", Widget.STORED, Section.STORED, updatable=False), None)
    runs_counted: int = declare(TaskField(  # scheduled runs started since it was (re-)enabled, when max_runs is set
        "Scheduled runs counted", Widget.STORED, Section.STORED, updatable=False), 0)
    limit_reached_at: int | None = declare(TaskField(  # DB-clock ms: it disabled itself on reaching max_runs
        "Reached its max_runs", Widget.STORED, Section.STORED, updatable=False), None)
    created_at: int | None = declare(TaskField("Created", Widget.STORED, Section.STORED, updatable=False), None)
    updated_at: int | None = declare(TaskField(  # DB-clock ms; the version operators compare-and-set
        "Updated", Widget.STORED, Section.STORED, updatable=False), None)

    @property
    def max_attempts(self) -> int:
        return self.retry.max_attempts if self.retry else 1

    @property
    def handler_kind(self) -> str:
        return str(self.handler.get("kind", "hook")) if self.handler else "hook"

    @property
    def catchup_policy(self) -> CatchupPolicy:
        return self.catchup or CatchupPolicy()

    @property
    def overlap_policy(self) -> OverlapPolicy:
        return self.overlap or OverlapPolicy()

    def due_at(self, minute_ms: int) -> bool:
        """Whether its calendar lets the cron fire at ``minute_ms`` (a minute the cron names)."""
        return self.calendar is None or self.calendar.allows(minute_ms, self.timezone)

    def start_of(self, minute_ms: int) -> int:
        """When the cron occurrence of ``minute_ms`` is to start: its minute, delayed by its jitter."""
        return minute_ms + jitter_delay(self.id, minute_ms, self.jitter_ms)

    def delayed_start(self, minute_ms: int) -> int | None:
        """A jittered occurrence's delayed start (docs/semantics.md O8); None: at its minute."""
        start = self.start_of(minute_ms)
        return start if start > minute_ms else None

    def upcoming(self, after_ms: int, count: int) -> list[int]:
        """Its next ``count`` fire minutes after ``after_ms``, its calendar applied."""
        return (self.calendar or Calendar()).upcoming(self.cron, self.timezone, after_ms, count)

    def masked(self) -> dict[str, Any]:
        """The definition as a dict fit for display: secrets in handler and params masked."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["handler"] = masked_handler(self.handler)
        data["params"] = mask_values(self.params)
        for name in ("retry", "catchup", "overlap", "calendar"):  # policies as their mappings
            value = getattr(self, name)
            data[name] = value.to_json() if value else None
        data["paused"] = vars(self.paused).copy() if self.paused else None
        return data

    def __repr__(self) -> str:  # never print a secret header or token in a log line
        shown = ", ".join(f"{k}={v!r}" for k, v in self.masked().items())
        return f"TaskDefinition({shown})"

    def same_definition(self, other: TaskDefinition) -> bool:
        """Equal in everything a user declares (ignores revision and timestamps)."""
        return all(getattr(self, f.name) == getattr(other, f.name) for f in DECLARED)


DECLARED = task_fields(TaskDefinition, declared=True)  # what a user declares, in order
_BY_NAME = {f.name: f for f in DECLARED}
UPDATABLE_FIELDS = tuple(f.name for f in DECLARED if f.spec.updatable)


def declared_text(task: TaskDefinition, name: str) -> str | None:
    """Field ``name`` of ``task`` checked as text by its declaration: without surrounding
    whitespace (as the form's inputs give it, so every door stores the same value), required
    unless it has a default, at most its ``max_length``, one line unless its widget is TEXT (the
    bound the form's and the API's inputs state is the one checked here)."""
    declared = _BY_NAME[name]
    if declared.spec.max_length is None:
        raise TypeError(f"{name}: a text field declares its max_length")
    value = getattr(task, name)
    check = check_text if declared.required else check_optional_text
    return check(value.strip() if isinstance(value, str) else value, name, declared.spec.max_length,
                 single_line=declared.spec.widget is not Widget.TEXT)


def validate_task(task: TaskDefinition, handler_validator: Any = None, *, stored: bool = False) -> TaskDefinition:
    """Return the task normalised, or raise ConfigError / InvalidCronError naming the field.
    ``stored``: the task is read back from the database (the size cap on params is for writes)."""
    check_id(task.id, "id")
    check_team(task.team, "team")
    name = declared_text(task, "name")
    assert name is not None  # a required field: declared_text refused None
    description = declared_text(task, "description")
    cron = validate_cron(task.cron)
    timezone = validate_timezone(task.timezone)
    for item in DECLARED:
        if item.spec.widget is Widget.CHECK:
            check_bool(getattr(task, item.name), item.name)
    retry = RetryPolicy.parse(task.retry)
    catchup = CatchupPolicy.parse(task.catchup)
    overlap = OverlapPolicy.parse(task.overlap)
    check_optional_int(task.pause_on_failure, "pause_on_failure", 1, PAUSE_ON_FAILURE_MAX)
    check_optional_int(task.max_runs, "max_runs", 1, MAX_RUNS_MAX)
    check_optional_int(task.jitter_ms, "jitter_ms", 1, JITTER_MAX_MS)
    if task.jitter_ms is not None and not stored:
        check_jitter(cron, timezone, task.jitter_ms)
    calendar = Calendar.parse(task.calendar)
    if task.node_group is not None:
        check_group(task.node_group, "node_group")
    params = check_params(task.params, capped=not stored)
    runbook_url = check_link(declared_text(task, "runbook_url"), "runbook_url")
    owner = declared_text(task, "owner")
    handler = task.handler
    if handler is not None:
        if not isinstance(handler, Mapping):
            raise ConfigError("handler", "must be a mapping with a 'kind', or None")
        check_json(handler, "handler")
        handler = handler_validator(handler) if handler_validator else dict(handler)
    if overlap is not None:
        overlap.check_kind(str(handler.get("kind", "hook")) if handler else "hook")
    return replace(task, name=name, description=description, cron=cron, timezone=timezone, retry=retry, params=params,
                   handler=handler, catchup=catchup, overlap=overlap, calendar=calendar, runbook_url=runbook_url,
                   owner=owner)


def declared_json(task: TaskDefinition) -> dict[str, Any]:
    """The declared fields as JSON values (the store's columns, a task file's entry): policies as
    their mappings, mappings as dicts."""
    return {f.name: _json_value(getattr(task, f.name)) for f in DECLARED}


def _json_value(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    return dict(value) if isinstance(value, Mapping) else value


@dataclass(frozen=True)
class Attempt:
    """One attempt of an execution, as the journal keeps it."""

    log_id: str  # stable UUID; the primary key of its log row
    attempt: int  # 1-based number within the execution's budget
    sequence: int  # ownership generation that ran it
    node_id: str
    started_at: int  # DB-clock ms
    finished_at: int | None = None
    status: AttemptStatus | None = None  # None while running
    error: str | None = None
    result: Any = None

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Attempt:
        values: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)}
        if values["status"] is not None:
            values["status"] = AttemptStatus(values["status"])
        return cls(**values)


@dataclass(frozen=True)
class Execution:
    """A journal row: one occurrence (cron minute or manual trigger) and what became of it."""

    occurrence_id: str
    task_id: str
    task_revision: int
    trigger: Trigger
    source: str | None
    idempotency_key: str | None
    scheduled_minute: int | None  # UTC minute start (ms) of a cron occurrence
    status: ExecutionStatus
    reason: str | None  # why skipped / interrupted / unknown (slot_busy, lease_expired, ...)
    sequence: int  # 1 for the first owner, +1 per takeover
    attempt: int  # attempts begun so far
    max_attempts: int  # the stored budget
    execution_token: str | None
    owner_node: str | None
    lease_until: int | None
    attempts: tuple[Attempt, ...]
    log_persistence: str | None
    resolved_by: str | None
    resolution_reason: str | None
    created_at: int
    updated_at: int
    # A jittered cron occurrence: no node claims it before this (DB clock); its fire lateness is
    # counted from here, not from its minute (docs/semantics.md O8). None: its minute.
    not_before: int | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


@dataclass(frozen=True)
class LogPersistence:
    """Whether the attempt's log row is known to be written."""

    status: LogPersistenceStatus
    error: str | None = None


@dataclass(frozen=True)
class ExecutionLog:
    """One attempt as operators read it: the log row, or what trigger() returns."""

    id: str
    occurrence_id: str
    task_id: str
    trigger: Trigger
    source: str | None
    status: ExecutionStatus  # an attempt's outcome is one of ExecutionStatus's values too
    sequence: int
    attempt: int
    node_id: str | None
    started_at: int | None
    finished_at: int | None
    duration_ms: int | None
    error: str | None
    result: Any
    persistence: LogPersistence = field(default=LogPersistence(LogPersistenceStatus.PERSISTED))

    @classmethod
    def of(cls, execution: Execution, attempt: Attempt | None, persistence: LogPersistence,
           status: ExecutionStatus | None = None) -> ExecutionLog:
        """The caller-facing record of an execution's last attempt (or of the occurrence itself)."""
        if attempt is None:
            return cls(id=execution.occurrence_id, occurrence_id=execution.occurrence_id,
                       task_id=execution.task_id, trigger=execution.trigger, source=execution.source,
                       status=status or execution.status, sequence=execution.sequence, attempt=0,
                       node_id=execution.owner_node, started_at=None, finished_at=None, duration_ms=None,
                       error=execution.reason, result=None, persistence=persistence)
        finished = attempt.finished_at
        return cls(id=attempt.log_id, occurrence_id=execution.occurrence_id, task_id=execution.task_id,
                   trigger=execution.trigger, source=execution.source,
                   status=ExecutionStatus(status or attempt.status or ExecutionStatus.UNKNOWN),
                   sequence=attempt.sequence, attempt=attempt.attempt, node_id=attempt.node_id,
                   started_at=attempt.started_at, finished_at=finished,
                   duration_ms=None if finished is None else max(0, finished - attempt.started_at),
                   error=attempt.error, result=attempt.result, persistence=persistence)

    @classmethod
    def of_journal(cls, execution: Execution) -> ExecutionLog:
        """The record of a journaled execution as any node reads it back (its last attempt)."""
        pending = execution.log_persistence == LogPersistenceStatus.PENDING
        persistence = LogPersistence(LogPersistenceStatus.PENDING if pending else LogPersistenceStatus.PERSISTED)
        attempt = execution.attempts[-1] if execution.attempts else None
        status = execution.status if execution.status in _OCCURRENCE_LEVEL else None
        return cls.of(execution, attempt, persistence, status)


# Statuses that describe the occurrence rather than its last attempt's own outcome.
_OCCURRENCE_LEVEL = (ExecutionStatus.UNKNOWN, ExecutionStatus.DISCARDED, ExecutionStatus.SKIPPED,
                     ExecutionStatus.INTERRUPTED)
