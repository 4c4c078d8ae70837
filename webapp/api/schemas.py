"""The JSON API's shared pieces and its non-task bodies, query strings and answers as pydantic models.

The handlers validate with these, and ``openapi.py`` generates the OpenAPI document from the
very same classes: there is no second description to keep in step. Request models are strict
(a string is no number, a number no boolean) and refuse unknown fields; query models read the
query string's text into numbers (ASCII digits only). These models check shapes and types only:
every rule about what a value may be is the core's (``validate_task``, ``check_*``), reached
through the same runtime calls the pages make, so the API and the forms refuse the same input
with the same code and field.

Here: the bases (``Strict``, ``Query``), the shared types (``Ms``, ``Limit``, ``BY_VALUE``), the
path ids, ``Version``, problems, and the executions', logs', notifications' and nodes' models.
The task operations' models are in ``task_schemas.py``, which imports from here (never back).
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
    field_validator,
)
from pydantic_core import CoreSchema, core_schema

from scheduler_core.reach.queue import FAILURE_CLASSES
from scheduler_core.statuses import AttemptStatus, DeliveryResolution, ExecutionStatus, Resolution
from scheduler_core.validation import ID_MAX, MAX_MS, PAGE_LIMIT, PAGE_OFFSET
from webapp.api.rules import (
    WHITESPACE,
    Id,
    JournalCursor,
    MessageId,
    PathId,
    QueueCursor,
    QueueReceipt,
    Reason,
    SegmentId,
    Whole,
    text,
)

# Whole last: it reads 548.0 as 548 before the constrained integer checks it.
Ms = Annotated[int, Field(ge=0, le=MAX_MS, description="unix milliseconds (DB clock)"), Whole]
Limit = Annotated[int, Field(ge=1, le=PAGE_LIMIT, description="rows per page")]
PROVIDER_MAX = 64  # reach.queue's filter: check_optional_text(provider, "provider", 64, ...)


def values_literal(choices: Any) -> Any:
    """An enum's values as a Literal: a refusal lists 'queued', 'running', ..., not the members' repr."""
    return Literal[tuple(str(choice) for choice in choices)]


class _ByValue:
    """Field metadata: ``Annotated[SomeStrEnum, BY_VALUE]`` is checked as ``values_literal(SomeStrEnum)``
    is (the same JSON schema, the same refusal listing the values, a string accepted by a strict
    model), and holds the enum's member."""

    def __get_pydantic_core_schema__(self, source: type[StrEnum], handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(source, handler.generate_schema(values_literal(source)))


BY_VALUE = _ByValue()


def omit_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


# A field that may be left out (it keeps the stored value) but not sent as null.
KEEP = Field(default=None, json_schema_extra=omit_default)


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


# --- versions: a body naming the version read (a task's delete, a delivery's requeue) -----------


class Version(Strict):
    expected_updated_at: Ms


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
