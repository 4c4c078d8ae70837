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

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from scheduler_core.statuses import AttemptStatus, DeliveryResolution, ExecutionStatus, Resolution
from scheduler_core.validation import MAX_MS, PAGE_LIMIT

Ms = Annotated[int, Field(ge=0, le=MAX_MS, description="unix milliseconds (DB clock)")]
Limit = Annotated[int, Field(ge=1, le=PAGE_LIMIT, description="rows per page")]
Text = Annotated[str, Field(max_length=100_000)]
Cursor = Annotated[str, Field(max_length=300, description="a cursor from the previous answer")]


class Strict(BaseModel):
    """A request body: JSON types as they are, no unknown field."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Query(BaseModel):
    """A query string: text read into the declared types, no unknown parameter."""

    model_config = ConfigDict(extra="forbid")


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


class RetryIn(Strict):
    max_attempts: int = Field(description="1 = no retry; counts the first attempt")
    backoff_ms: list[int] = Field(default_factory=list, description="wait before attempt n+1")


class TaskCreate(Strict):
    """An ``api`` or ``hook`` task (code tasks are defined in the application, never here)."""

    id: Text
    name: Text
    cron: Text
    description: Text | None = None
    timezone: Text = "UTC"
    enabled: bool = True
    idempotent: bool = False
    delete_after_run: bool = False
    retry: RetryIn | None = None
    handler: dict[str, Any] | None = Field(default=None, description='{"kind": "api", "url": ...} or {"kind": "hook"}')
    params: dict[str, Any] | None = None
    node_group: Text | None = None


class TaskUpdate(Strict):
    """The fields to change (others stay as stored), at the version read (``updated_at``).
    Masked values (``***``) sent back mean "keep the stored secret"."""

    expected_updated_at: Ms
    name: Text | None = None
    cron: Text | None = None
    description: Text | None = None
    timezone: Text | None = None
    enabled: bool | None = None
    idempotent: bool | None = None
    delete_after_run: bool | None = None
    retry: RetryIn | None = None
    handler: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    node_group: Text | None = None


class Version(Strict):
    expected_updated_at: Ms


class PauseIn(Strict):
    reason: Text = Field(description="why: the next operator reads it")
    minutes: int | None = Field(default=None, description="resume by itself after this many minutes (1..10080)")


class TriggerIn(Strict):
    idempotency_key: Text | None = Field(default=None, description="the same key again returns the same occurrence")
    source: Text | None = None


class TaskSearch(Query):
    q: Annotated[str, Field(max_length=2_000, description="status:failed kind:api enabled:false tz:... words")] = ""
    limit: Limit = 50
    after: Cursor | None = None
    before: Cursor | None = None


class RetryOut(BaseModel):
    max_attempts: int
    backoff_ms: list[int]


class PauseOut(BaseModel):
    at: int
    until: int | None
    by: str | None
    reason: str | None


class Task(BaseModel):
    """A stored definition, secrets masked (``***``)."""

    id: str
    name: str
    description: str | None
    cron: str
    timezone: str
    enabled: bool
    idempotent: bool
    delete_after_run: bool
    retry: RetryOut | None
    handler: dict[str, Any] | None
    params: dict[str, Any] | None
    node_group: str | None
    catchup: dict[str, Any] | None
    revision: int
    paused: PauseOut | None
    created_at: int | None
    updated_at: int | None = Field(description="the version a change must name (expected_updated_at)")


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
    status: Literal[tuple(ExecutionStatus)] | None = None  # type: ignore[valid-type]
    task_id: Annotated[str, Field(max_length=128)] | None = None
    limit: Limit = 50
    before: Cursor | None = None
    after: Cursor | None = None


class ResolveExecution(Strict):
    status: Literal[tuple(Resolution)]  # type: ignore[valid-type]
    reason: Text = Field(description="required: what was checked (goes into the audit trail)")
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
    task_id: Annotated[str, Field(max_length=128)] | None = None
    status: Literal[tuple(AttemptStatus)] | None = None  # type: ignore[valid-type]
    trigger_source: Annotated[str, Field(max_length=128)] | None = None
    started_after: Ms | None = Field(default=None, description="inclusive, unix ms")
    started_before: Ms | None = Field(default=None, description="exclusive, unix ms")
    limit: Limit = 50
    before: Cursor | None = None
    after: Cursor | None = None


class OffsetQuery(Query):
    limit: Limit = 50
    offset: Annotated[int, Field(ge=0, le=1_000_000)] = 0


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
    provider: Annotated[str, Field(max_length=128)] | None = None
    failure: Annotated[str, Field(max_length=64)] | None = None
    template: Annotated[str, Field(max_length=128)] | None = None
    limit: Limit = 50
    after: Cursor | None = None


class UnknownQuery(Query):
    limit: Limit = 50
    after: Cursor | None = None


class ResolveDelivery(Strict):
    status: Literal[tuple(DeliveryResolution)]  # type: ignore[valid-type]
    reason: Text
    message_id: Text | None = Field(default=None, description='the provider\'s id, only with "sent"')
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
