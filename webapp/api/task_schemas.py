"""The task operations' bodies, query string and answers (``tasks.py``) as pydantic models.

``TaskCreate``, ``TaskUpdate`` and ``Task`` are derived from ``TaskDefinition``'s declarations
(``scheduler_core.task_schema``); the retry, catch-up and calendar bodies are checked by the
core's own policies. The bases and the types every operation shares (``Strict``, ``Query``, ``Ms``,
``Version``, the path ids, problems) are ``schemas.py``'s: this module imports from there,
never the other way.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, create_model, model_validator

from scheduler_core.model import DECLARED
from scheduler_core.runtime.backfill import REASON_MAX as BACKFILL_REASON_MAX
from scheduler_core.runtime.task_operations import MAX_QUERY
from scheduler_core.task_policies import (
    BACKOFF_MAX_MS,
    BUFFER_LIMIT_RANGE,
    CATCHUP_WINDOW_MAX_MS,
    EXCLUDE_MAX,
    MAX_ATTEMPTS_RANGE,
    Calendar,
    CatchupMode,
    CatchupPolicy,
    OverlapMode,
    OverlapPolicy,
    RetryPolicy,
)
from scheduler_core.task_schema import DeclaredField, Widget
from webapp.api.rules import Group, Id, PathId, Reason, StrippedId, Team, Whole, text
from webapp.api.schemas import Limit, Ms, Query, Strict, omit_default, values_literal

Text = Annotated[str, Field(max_length=100_000)]
MAX_PAUSE_MINUTES = 7 * 24 * 60


def _bounds(low: int, high: int) -> dict[str, int]:
    """A range the document states and the core's policy checks (its message, its field), not pydantic."""
    return {"minimum": low, "maximum": high}


# RetryIn, CatchupIn, OverlapIn and CalendarIn are checked by the core's policies themselves (their
# model validators), so the API refuses a value with the form's and the task file's words and field.
class RetryIn(Strict):
    """How often a failing idempotent task is tried, and how long to wait in between."""

    max_attempts: Annotated[int, Field(json_schema_extra=_bounds(*MAX_ATTEMPTS_RANGE),
                                       description="1 = no retry; counts the first attempt"), Whole]
    backoff_ms: list[Annotated[int, Field(json_schema_extra=_bounds(0, BACKOFF_MAX_MS)), Whole]] = Field(
        default_factory=list, json_schema_extra={"maxItems": MAX_ATTEMPTS_RANGE[1]},
        description="wait before attempt n+1")

    @model_validator(mode="after")
    def _policy(self) -> RetryIn:
        RetryPolicy(self.max_attempts, tuple(self.backoff_ms))  # ConfigError naming retry.<field>
        return self


class CatchupIn(Strict):
    """What a node does with occurrences nobody ran while the cluster was down."""

    policy: values_literal(CatchupMode) = Field(  # type: ignore[valid-type]
        default="none", description="none: journal them missed; latest: run the newest; all: run each, in order")
    window_ms: Annotated[int, Field(json_schema_extra=_bounds(0, CATCHUP_WINDOW_MAX_MS),
                                    description="how far back it looks"), Whole] = CatchupPolicy().window_ms

    @model_validator(mode="after")
    def _policy(self) -> CatchupIn:
        CatchupPolicy(self.policy, self.window_ms)  # ConfigError naming catchup.<field>
        return self


class OverlapIn(Strict):
    """What a cron occurrence does while the task's previous run still holds its slot."""

    policy: values_literal(OverlapMode) = Field(  # type: ignore[valid-type]
        default="skip", description="skip; buffer_one; buffer_all (up to buffer_limit wait); cancel_other; "
                                    "terminate_other (python, js and command handlers)")
    buffer_limit: Annotated[int, Field(json_schema_extra=_bounds(*BUFFER_LIMIT_RANGE),
                                       description="buffer_all: most occurrences waiting at once"), Whole] = (
        OverlapPolicy().buffer_limit)

    @model_validator(mode="after")
    def _policy(self) -> OverlapIn:
        OverlapPolicy(self.policy, self.buffer_limit)  # ConfigError naming overlap.<field>
        return self


class CalendarIn(Strict):
    """When the schedule may fire at all: an active window and excluded dates or minutes."""

    active_from_ms: Ms | None = Field(default=None, description="unix ms; no fire before it (inclusive)")
    active_until_ms: Ms | None = Field(default=None, description="unix ms; no fire from it on (exclusive)")
    exclude: list[Annotated[str, Field(max_length=255)]] = Field(
        default_factory=list, json_schema_extra={"maxItems": EXCLUDE_MAX},
        description="dates (YYYY-MM-DD) and cron expressions naming minutes not to run, in the task's zone")

    @model_validator(mode="after")
    def _policy(self) -> CalendarIn:
        Calendar(self.active_from_ms, self.active_until_ms, tuple(self.exclude))  # ConfigError naming calendar.<field>
        return self


def _input_type(declared: DeclaredField) -> Any:
    """The JSON type a request gives a task field, from how the field is declared."""
    spec = declared.spec
    longest = spec.max_length or 100_000
    types: dict[Widget, Any] = {
            Widget.ID: PathId, Widget.LINE: text(longest, single_line=True), Widget.TEXT: text(longest),
            Widget.CHECK: bool, Widget.CRON: Text, Widget.ZONE: Text, Widget.GROUP: Group, Widget.TEAM: Team,
            Widget.JSON: dict[str, Any], Widget.RETRY: RetryIn, Widget.CATCHUP: CatchupIn,
            Widget.OVERLAP: OverlapIn, Widget.CALENDAR: CalendarIn, Widget.HANDLER: dict[str, Any],
            Widget.COUNT: Annotated[int, Field(json_schema_extra={"minimum": 1, "maximum": longest}), Whole]}
    return types[spec.widget]


def _described(declared: DeclaredField, **more: Any) -> Any:
    if declared.spec.widget is Widget.ID:  # the id's type says what an id may be
        return Field(**more)
    return Field(description=declared.spec.hint or declared.spec.label, **more)


def _create_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for declared in DECLARED:
        kind = _input_type(declared)
        if declared.required:
            fields[declared.name] = (kind, _described(declared))
        elif declared.default is None:
            fields[declared.name] = (kind | None, _described(declared, default=None))
        else:
            fields[declared.name] = (kind, _described(declared, default=declared.default))
    return fields


def _update_fields() -> dict[str, Any]:
    """Each field an update may change, optional: a nullable one may be null, the others only left out."""
    fields: dict[str, Any] = {"expected_updated_at": (Ms, ...)}
    for declared in DECLARED:
        if not declared.spec.updatable:
            continue
        kind = _input_type(declared)
        if declared.default is None:
            fields[declared.name] = (kind | None, _described(declared, default=None))
        else:
            fields[declared.name] = (kind, _described(declared, default=None, json_schema_extra=omit_default))
    return fields


# Both derived from TaskDefinition's declarations (scheduler_core.task_schema): a declared field is
# settable through the API with nothing written here.
TaskCreate = create_model("TaskCreate", __base__=Strict, __doc__="An ``api`` or ``hook`` task (code tasks are "
                          "defined in the application, never here).", **_create_fields())
TaskUpdate = create_model("TaskUpdate", __base__=Strict, __doc__="The fields to change (others stay as stored), at "
                          "the version read (``updated_at``). Masked values (``***``) sent back mean \"keep the "
                          "stored secret\".", **_update_fields())


class PauseIn(Strict):
    reason: Reason = Field(description="why: the next operator reads it")
    minutes: Annotated[int, Field(ge=1, le=MAX_PAUSE_MINUTES), Whole] | None = Field(
        default=None, description="resume by itself after this many minutes")


class TriggerIn(Strict):
    idempotency_key: StrippedId | None = Field(default=None,
                                               description="the same key again returns the same occurrence")
    source: StrippedId | None = None


class BackfillIn(Strict):
    start_ms: Ms = Field(description="the range's first minute (unix ms, DB clock)")
    end_ms: Ms = Field(description="its last minute, included; before the current minute")
    reason: Annotated[text(BACKFILL_REASON_MAX, blank=True),  # type: ignore[valid-type]
                      Field(description="why: written to the audit trail")] | None = None
    dry_run: bool = Field(default=False, description="say what the range holds, queue nothing")


class TaskSearch(Query):
    q: Annotated[text(MAX_QUERY, blank=True),  # type: ignore[valid-type]
                 Field(description="status:failed kind:api enabled:false tz:... words")] = ""
    limit: Limit = 50
    after: Id | None = Field(default=None, description="next_after of the previous answer")
    before: Id | None = Field(default=None, description="prev_before of the previous answer")


class RetryOut(BaseModel):
    max_attempts: int
    backoff_ms: list[int]


class PauseOut(BaseModel):
    at: int
    until: int | None
    by: str | None
    reason: str | None


class CatchupOut(BaseModel):
    policy: str
    window_ms: int


class OverlapOut(BaseModel):
    policy: str
    buffer_limit: int


class CalendarOut(BaseModel):
    active_from_ms: int | None
    active_until_ms: int | None
    exclude: list[str]


def _output_type(declared: DeclaredField) -> Any:
    kind = {Widget.CHECK: bool, Widget.JSON: dict[str, Any], Widget.HANDLER: dict[str, Any], Widget.RETRY: RetryOut,
            Widget.COUNT: int, Widget.CATCHUP: CatchupOut, Widget.OVERLAP: OverlapOut,
            Widget.CALENDAR: CalendarOut}.get(declared.spec.widget, str)
    return kind | None if not declared.required and declared.default is None else kind


Task = create_model(  # type: ignore[call-overload]  # the fields are computed: no overload says so
    "Task", __base__=BaseModel, __doc__="A stored definition, secrets masked (``***``).",
    **{declared.name: (_output_type(declared), ...) for declared in DECLARED},
    revision=(int, ...), paused=(PauseOut | None, ...),
    runs_counted=(int, Field(description="scheduled runs started since it was created or enabled again "
                                         "(counted when max_runs is set)")),
    limit_reached_at=(int | None, Field(description="when it disabled itself on reaching max_runs (unix ms); "
                                                    "null: it did not, or was enabled since")),
    created_at=(int | None, ...),
    updated_at=(int | None, Field(description="the version a change must name (expected_updated_at)")))


class TaskRow(BaseModel):
    id: str
    task: Task | None = Field(description="None: the stored definition is unreadable (see problem)")  # type: ignore[valid-type]
    problem: str | None
    state: str | None = Field(description="ok | paused | disabled | blocked")
    last_status: str | None
    last_occurrence_id: str | None
    next_run_ms: int | None


class TaskPage(BaseModel):
    rows: list[TaskRow]
    next_after: str | None = Field(description="pass as after= for the next page")
    prev_before: str | None = Field(description="pass as before= for the previous page")


class Triggered(BaseModel):
    occurrence_id: str
    status: str
    reason: str | None
    existing: bool = Field(description="the idempotency key named an occurrence that already existed")


class Deleted(BaseModel):
    id: str
    deleted: bool


class RecentRunOut(BaseModel):
    occurrence_id: str
    trigger: str
    scheduled_minute: int | None
    status: str
    reason: str | None
    started_at: int | None = Field(description="the first attempt's start (unix ms); null: none began")
    finished_at: int | None = Field(description="the last attempt's end (unix ms); null: running, or none")
    duration_ms: int | None


class ScheduleCountsOut(BaseModel):
    missed: int = Field(description="minutes no node ran")
    skipped_by_overlap: int = Field(description="skipped: the slot was held (slot_busy)")
    dropped_from_buffer: int = Field(description="skipped: the overlap policy's buffer was full (buffer_full)")
    skipped_by_run_limit: int = Field(description="skipped: its max_runs was spent (max_runs)")
    waiting: int = Field(description="queued now for the slot or a node")
    paused_by_failure: int = Field(description="pauses by pause_on_failure (the audit trail)")
    since_ms: int | None = Field(description="the journal's oldest row of the task: the counts cover from it on")


class ScheduleOut(BaseModel):
    """A task's schedule described: next fire times, last runs, what did not run."""

    task_id: str
    state: str
    next_fire_times: list[int]
    last_runs: list[RecentRunOut]
    counts: ScheduleCountsOut
    runs_counted: int = Field(description="scheduled runs started since it was created or enabled again")
    runs_left: int | None = Field(description="scheduled runs before it disables itself (max_runs); null: no limit")
    limit_reached_at: int | None = Field(description="when it disabled itself on reaching max_runs (unix ms)")


class BackfillOut(BaseModel):
    """What the range held, and what was queued (a dry run: what would be)."""

    task_id: str
    count: int = Field(description="the task's fire times in the range (its cron, zone and calendar)")
    first_ms: int | None = Field(description="the first of them (null: none)")
    last_ms: int | None = Field(description="the last of them")
    new: int = Field(description="not journaled before: queued")
    again: int = Field(description="journaled missed or skipped, never run: queued")
    already: int = Field(description="ran, run or wait already: left as they are")
    queued: int = Field(description="occurrences queued by this call (0 on a dry run)")
    dry_run: bool
