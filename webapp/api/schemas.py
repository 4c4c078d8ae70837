"""The JSON API's bodies, query strings and answers as pydantic models.

The handlers validate with these, and ``openapi.py`` generates the OpenAPI document from the
very same classes: there is no second description to keep in step. Request models are strict
(a string is no number, a number no boolean) and refuse unknown fields; query models read the
query string's text into numbers (ASCII digits only). These models check shapes and types only:
every rule about what a value may be is the core's (``validate_task``, ``check_*``), reached
through the same runtime calls the pages make, so the API and the forms refuse the same input
with the same code and field.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import CoreSchema, core_schema

from scheduler_core.model import (
    BACKOFF_MAX_MS,
    CATCHUP_WINDOW_MAX_MS,
    DECLARED,
    MAX_ATTEMPTS_RANGE,
    CatchupMode,
    CatchupPolicy,
    RetryPolicy,
)
from scheduler_core.reach.queue import FAILURE_CLASSES
from scheduler_core.runtime.task_operations import MAX_QUERY
from scheduler_core.statuses import AttemptStatus, DeliveryResolution, ExecutionStatus, Resolution
from scheduler_core.task_schema import DeclaredField, Widget
from scheduler_core.validation import ID_MAX, MAX_MS, PAGE_LIMIT, PAGE_OFFSET
from webapp.api.rules import (
    WHITESPACE,
    Group,
    Id,
    JournalCursor,
    MessageId,
    PathId,
    QueueCursor,
    QueueReceipt,
    Reason,
    SegmentId,
    StrippedId,
    Whole,
    text,
)

# Whole last: it reads 548.0 as 548 before the constrained integer checks it.
Ms = Annotated[int, Field(ge=0, le=MAX_MS, description="unix milliseconds (DB clock)"), Whole]
Limit = Annotated[int, Field(ge=1, le=PAGE_LIMIT, description="rows per page")]
Text = Annotated[str, Field(max_length=100_000)]
MAX_PAUSE_MINUTES = 7 * 24 * 60
PROVIDER_MAX = 64  # reach.queue's filter: check_optional_text(provider, "provider", 64, ...)


def _values(choices: Any) -> Any:
    """An enum's values as a Literal: a refusal lists 'queued', 'running', ..., not the members' repr."""
    return Literal[tuple(str(choice) for choice in choices)]


class _ByValue:
    """Field metadata: ``Annotated[SomeStrEnum, BY_VALUE]`` is checked as ``_values(SomeStrEnum)``
    is (the same JSON schema, the same refusal listing the values, a string accepted by a strict
    model), and holds the enum's member."""

    def __get_pydantic_core_schema__(self, source: type[StrEnum], handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(source, handler.generate_schema(_values(source)))


BY_VALUE = _ByValue()


def _omit_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


# A field that may be left out (it keeps the stored value) but not sent as null.
KEEP = Field(default=None, json_schema_extra=_omit_default)


class Strict(BaseModel):
    """A request body: JSON types as they are, no unknown field."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Query(BaseModel):
    """A query string: text read into the declared types, no unknown parameter. A number is ASCII
    digits only: pydantic alone would also read `` 5``, ``+5``, ``5_0`` and other scripts' digits."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _digits_only(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields[info.field_name or ""]
        whole = field.annotation is int or int in getattr(field.annotation, "__args__", ())
        if whole and isinstance(value, str) and not (value.isascii() and value.isdigit()):
            raise ValueError(f"must be a whole number in ASCII digits (got {value[:40]!r})")
        return value


# --- path parameters: a handler annotates its own with one of these (core.operation reads them) --

TaskId = PathId  # <path:task_id>: a task id may hold /
OccurrenceId = SegmentId  # <occurrence_id>: one part of the path
QueueId = QueueReceipt


# --- problems ---------------------------------------------------------------------------------


class FieldProblem(BaseModel):
    field: str
    message: str


class Problem(BaseModel):
    """RFC 9457 problem details (``application/problem+json``)."""

    type: str = Field(description="a URI naming the kind of problem")
    title: str
    status: int
    detail: str
    code: str = Field(description="the stable error code, e.g. hai:scheduler:012")
    field: str | None = Field(default=None, description="the input field at fault, when one is")
    errors: list[FieldProblem] | None = Field(default=None, description="every field at fault (validation)")


# --- tasks ------------------------------------------------------------------------------------


def _bounds(low: int, high: int) -> dict[str, int]:
    """A range the document states and the core's policy checks (its message, its field), not pydantic."""
    return {"minimum": low, "maximum": high}


# RetryIn and CatchupIn are checked by the core's policies themselves (their model validators), so
# the API refuses a value with the form's and the task file's words and field.
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

    policy: _values(CatchupMode) = Field(default="none", description="none: journal them missed; latest: run the "
                                         "newest; all: run each, in order")  # type: ignore[valid-type]
    window_ms: Annotated[int, Field(json_schema_extra=_bounds(0, CATCHUP_WINDOW_MAX_MS),
                                    description="how far back it looks"), Whole] = CatchupPolicy().window_ms

    @model_validator(mode="after")
    def _policy(self) -> CatchupIn:
        CatchupPolicy(self.policy, self.window_ms)  # ConfigError naming catchup.<field>
        return self


def _input_type(declared: DeclaredField) -> Any:
    """The JSON type a request gives a task field, from how the field is declared."""
    spec = declared.spec
    longest = spec.max_length or 100_000
    return {Widget.ID: PathId, Widget.LINE: text(longest, single_line=True), Widget.TEXT: text(longest),
            Widget.CHECK: bool, Widget.CRON: Text, Widget.ZONE: Text, Widget.GROUP: Group,
            Widget.JSON: dict[str, Any], Widget.RETRY: RetryIn, Widget.CATCHUP: CatchupIn,
            Widget.HANDLER: dict[str, Any]}[spec.widget]


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
            fields[declared.name] = (kind, _described(declared, default=None, json_schema_extra=_omit_default))
    return fields


# Both derived from TaskDefinition's declarations (scheduler_core.task_schema): a declared field is
# settable through the API with nothing written here.
TaskCreate = create_model("TaskCreate", __base__=Strict, __doc__="An ``api`` or ``hook`` task (code tasks are "
                          "defined in the application, never here).", **_create_fields())
TaskUpdate = create_model("TaskUpdate", __base__=Strict, __doc__="The fields to change (others stay as stored), at "
                          "the version read (``updated_at``). Masked values (``***``) sent back mean \"keep the "
                          "stored secret\".", **_update_fields())


class Version(Strict):
    expected_updated_at: Ms


class PauseIn(Strict):
    reason: Reason = Field(description="why: the next operator reads it")
    minutes: Annotated[int, Field(ge=1, le=MAX_PAUSE_MINUTES), Whole] | None = Field(
        default=None, description="resume by itself after this many minutes")


class TriggerIn(Strict):
    idempotency_key: StrippedId | None = Field(default=None,
                                               description="the same key again returns the same occurrence")
    source: StrippedId | None = None


class TaskSearch(Query):
    q: Annotated[text(MAX_QUERY, blank=True),
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


def _output_type(declared: DeclaredField) -> Any:
    kind = {Widget.CHECK: bool, Widget.JSON: dict[str, Any], Widget.HANDLER: dict[str, Any], Widget.RETRY: RetryOut,
            Widget.CATCHUP: CatchupOut}.get(declared.spec.widget, str)
    return kind | None if not declared.required and declared.default is None else kind


Task = create_model(
    "Task", __base__=BaseModel, __doc__="A stored definition, secrets masked (``***``).",
    **{declared.name: (_output_type(declared), ...) for declared in DECLARED},
    revision=(int, ...), paused=(PauseOut | None, ...), created_at=(int | None, ...),
    updated_at=(int | None, Field(description="the version a change must name (expected_updated_at)")))


class TaskRow(BaseModel):
    id: str
    task: Task | None = Field(description="None: the stored definition is unreadable (see problem)")
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


# --- executions ---------------------------------------------------------------------------------


class Attempt(BaseModel):
    log_id: str
    attempt: int
    sequence: int
    node_id: str
    started_at: int
    finished_at: int | None
    status: str | None
    error: str | None = Field(description="secrets masked")
    result: Any = Field(default=None, description="secrets masked")


class Execution(BaseModel):
    occurrence_id: str
    task_id: str
    task_revision: int
    trigger: str
    source: str | None
    idempotency_key: str | None
    scheduled_minute: int | None
    status: str
    reason: str | None
    sequence: int
    attempt: int
    max_attempts: int
    owner_node: str | None
    lease_until: int | None
    log_persistence: str | None
    resolved_by: str | None
    resolution_reason: str | None
    created_at: int
    updated_at: int = Field(description="the version a resolution must name")
    attempts: list[Attempt] | None = Field(default=None, description="only when one execution is read")


class ExecutionPage(BaseModel):
    rows: list[Execution]
    older: str | None = Field(description="pass as before= for the next, older page")
    newer: str | None = Field(description="pass as after= for the previous, newer page")


class ExecutionQuery(Query):
    status: Annotated[ExecutionStatus, BY_VALUE] | None = None
    task_id: Id | None = None
    limit: Limit = 50
    before: JournalCursor | None = Field(default=None, description="older: the answer's older cursor (not with after)")
    after: JournalCursor | None = Field(default=None, description="newer: the answer's newer cursor (not with before)")


class ResolveExecution(Strict):
    status: Annotated[Resolution, BY_VALUE]
    reason: Reason = Field(description="required: what was checked (goes into the audit trail)")
    expected_updated_at: Ms


# --- logs ---------------------------------------------------------------------------------------


class LogEntry(BaseModel):
    id: str
    occurrence_id: str
    task_id: str
    trigger: str
    source: str | None
    status: str
    sequence: int
    attempt: int
    node_id: str | None
    started_at: int | None
    finished_at: int | None
    duration_ms: int | None
    error: str | None = Field(description="secrets masked")
    result: Any = Field(default=None, description="secrets masked")


class LogPage(BaseModel):
    rows: list[LogEntry]
    older: str | None
    newer: str | None


class LogQuery(Query):
    task_id: Id | None = None
    status: Annotated[AttemptStatus, BY_VALUE] | None = None
    trigger_source: Id | None = None
    started_after: Ms | None = Field(default=None, description="inclusive, unix ms")
    started_before: Ms | None = Field(default=None, description="exclusive, unix ms")
    limit: Limit = 50
    before: JournalCursor | None = Field(default=None, description="older: the answer's older cursor (not with after)")
    after: JournalCursor | None = Field(default=None, description="newer: the answer's newer cursor (not with before)")


class OffsetQuery(Query):
    limit: Limit = 50
    offset: Annotated[int, Field(ge=0, le=PAGE_OFFSET)] = 0


class LogFailures(BaseModel):
    rows: list[Execution]
    count: int = Field(description="pending log writes, counted up to count_capped")
    more: bool = Field(description="there are more than count")


class Repaired(BaseModel):
    occurrence_id: str
    log_persistence: str | None
    repaired: bool = Field(description="this call wrote the log rows (false: nothing was pending)")


class RepairedAll(BaseModel):
    repaired: int
    failed: int
    remaining: int
    remaining_more: bool
    rounds: int


# --- notifications ------------------------------------------------------------------------------


class Delivery(BaseModel):
    """A queued message's safe metadata: never its body or recipient."""

    queue_id: str
    provider: str
    template: str | None
    status: str
    attempt_count: int
    max_attempts: int
    next_attempt_at: int
    last_failure: str | None
    message_id: str | None
    created_at: int
    updated_at: int = Field(description="the version a requeue or resolution must name")
    held_until: int | None


class DeliveryPage(BaseModel):
    rows: list[Delivery]
    next_after: str | None


class DeadQuery(Query):
    provider: text(PROVIDER_MAX, single_line=True) | None = None  # type: ignore[valid-type]
    failure: Literal[FAILURE_CLASSES] | None = None  # type: ignore[valid-type]
    template: text(ID_MAX) | None = None  # type: ignore[valid-type]
    limit: Limit = 50
    after: QueueCursor | None = None


class UnknownQuery(Query):
    limit: Limit = 50
    after: QueueCursor | None = None


class ResolveDelivery(Strict):
    """Settle an unknown delivery: "sent" may name the provider's message id, "discarded" not
    (its message_id is null, blank or left out)."""

    model_config = ConfigDict(json_schema_extra={
        "if": {"properties": {"status": {"const": "discarded"}}, "required": ["status"]},
        "then": {"properties": {"message_id": {"anyOf": [
            {"type": "null"}, {"type": "string", "pattern": f"^[{WHITESPACE}]*$"}]}}}})

    status: Annotated[DeliveryResolution, BY_VALUE]
    reason: Reason
    message_id: MessageId | None = None
    expected_updated_at: Ms


# --- nodes, health ------------------------------------------------------------------------------


class Lease(BaseModel):
    occurrence_id: str
    task_id: str
    lease_until: int | None


class Node(BaseModel):
    node_id: str
    host: str
    pid: int
    started_at: int
    last_seen_at: int
    stopped_at: int | None
    alive: bool
    capabilities: list[str]
    groups: list[str]
    leases: list[Lease]


class NodeList(BaseModel):
    rows: list[Node]
    now_ms: int


class Health(BaseModel):
    status: str = Field(description="ok | migrations_pending | unavailable")
    database_clock_ms: int | None
    schema_revision: str | None
