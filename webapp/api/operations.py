"""``/api/v1`` beyond tasks: executions, logs, notifications, nodes, health.

Each handler makes the call its page makes (``webapp/executions.py``, ``logs.py``,
``notifications.py``, ``nodes.py``, ``health.py``) and records the same audit action. Results
and errors of attempts go out with secrets masked, as the log pages show them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from flask import current_app

from scheduler_core.db import health_check, migration_state
from scheduler_core.errors import ConfigError, ExecutionNotFoundError, SchedulerError
from scheduler_core.masking import mask_text, mask_values
from scheduler_core.model import Execution, ExecutionLog
from scheduler_core.reach.queue import QueueRow
from scheduler_core.runtime.accounts import MAX_REASON
from scheduler_core.runtime.execution_operations import Cursor
from scheduler_core.statuses import DeliveryResolution, LogPersistenceStatus, QueueStatus, Resolution
from scheduler_core.validation import check_text
from webapp.api import schemas as s
from webapp.api.core import FORBIDDEN_CODE, ApiProblem, Caller, not_found, operation
from webapp.forms import review_errors
from webapp.logs import REPAIR_ALL_ROUNDS
from webapp.node import reach_of, scheduler_of
from webapp.team_scope import audit_team

ALIVE_HEARTBEATS = 3  # a node is alive while its heartbeat is younger than three intervals


def _token(cursor: Cursor | None) -> str | None:
    return cursor.token() if cursor is not None else None


def _masked_result(result: Any) -> Any:
    return mask_text(result) if isinstance(result, str) else mask_values(result)


def execution_out(execution: Execution, with_attempts: bool = False) -> s.Execution:
    attempts = None
    if with_attempts:
        attempts = [s.Attempt(log_id=a.log_id, attempt=a.attempt, sequence=a.sequence, node_id=a.node_id,
                              started_at=a.started_at, finished_at=a.finished_at, status=a.status,
                              error=mask_text(a.error), result=_masked_result(a.result)) for a in execution.attempts]
    return s.Execution(
        occurrence_id=execution.occurrence_id, task_id=execution.task_id, task_revision=execution.task_revision,
        trigger=execution.trigger, source=execution.source, idempotency_key=execution.idempotency_key,
        scheduled_minute=execution.scheduled_minute, status=execution.status, reason=execution.reason,
        sequence=execution.sequence, attempt=execution.attempt, max_attempts=execution.max_attempts,
        owner_node=execution.owner_node, lease_until=execution.lease_until,
        log_persistence=execution.log_persistence, resolved_by=execution.resolved_by,
        resolution_reason=execution.resolution_reason, created_at=execution.created_at,
        updated_at=execution.updated_at, attempts=attempts)


def _log_out(log: ExecutionLog) -> s.LogEntry:
    return s.LogEntry(id=log.id, occurrence_id=log.occurrence_id, task_id=log.task_id, trigger=log.trigger,
                      source=log.source, status=log.status, sequence=log.sequence, attempt=log.attempt,
                      node_id=log.node_id, started_at=log.started_at, finished_at=log.finished_at,
                      duration_ms=log.duration_ms, error=mask_text(log.error), result=_masked_result(log.result))


def _review(status: str, outcomes: tuple[str, ...], reason: str) -> str:
    """The resolve form's rules (a reason is required), raised as the core's ConfigError; the
    reason is checked as the audit trail will store it before anything is changed."""
    check_text(reason, "reason", MAX_REASON, blank=True)
    errors = review_errors(status, outcomes, reason.strip(), 0)
    if errors:
        field, message = next(iter(errors.items()))
        raise ConfigError(field, message)
    return reason.strip()


# --- executions -----------------------------------------------------------------------------------


@operation("GET", "/executions", summary="The journal newest first, filtered, keyset pages", role="viewer",
           query=s.ExecutionQuery, response=s.ExecutionPage)
def list_executions(caller: Caller, query: s.ExecutionQuery) -> s.ExecutionPage:
    page = scheduler_of(current_app).execution.page(
        None if query.status is None else str(query.status), query.task_id, query.limit, before=query.before,
        after=query.after, scope=caller.access.scope())
    return s.ExecutionPage(rows=[execution_out(row) for row in page.rows], older=_token(page.older),
                           newer=_token(page.newer))


@operation("GET", "/executions/<occurrence_id>", summary="One execution with its attempts", role="viewer",
           response=s.Execution)
def get_execution(caller: Caller, occurrence_id: s.OccurrenceId) -> s.Execution:
    return execution_out(scheduler_of(current_app).execution.get(occurrence_id, caller.access.scope()),
                         with_attempts=True)


@operation("POST", "/executions/resolve/<occurrence_id>",
           summary="Settle an unknown execution as success or discarded, at the version read", role="operator",
           body=s.ResolveExecution, response=s.Execution)
def resolve_execution(caller: Caller, body: s.ResolveExecution, occurrence_id: s.OccurrenceId) -> s.Execution:
    reason = _review(body.status, tuple(Resolution), body.reason)
    execution = scheduler_of(current_app).execution
    before = execution.get(occurrence_id, caller.access.scope())
    try:
        after = execution.resolve_unknown(occurrence_id, body.status, body.expected_updated_at, caller.name, reason,
                                          caller.access.scope("operator"))
    except ExecutionNotFoundError:  # seen, but not an operator of its team
        raise ApiProblem(403, "Forbidden", "resolving this execution needs the operator role in its task's team",
                         FORBIDDEN_CODE) from None
    caller.audit("execution.resolve_unknown", occurrence_id, before={"status": before.status},
                 after={"status": after.status}, reason=reason)
    return execution_out(after, with_attempts=True)


# --- logs -----------------------------------------------------------------------------------------


@operation("GET", "/logs", summary="Attempt logs newest first, filtered, keyset pages", role="viewer",
           query=s.LogQuery, response=s.LogPage)
def list_logs(caller: Caller, query: s.LogQuery) -> s.LogPage:
    page = scheduler_of(current_app).execution.log_page(
        query.task_id, None if query.status is None else str(query.status), query.trigger_source,
        query.started_after, query.started_before, query.limit, before=query.before, after=query.after,
        scope=caller.access.scope())
    return s.LogPage(rows=[_log_out(row) for row in page.rows], older=_token(page.older), newer=_token(page.newer))


@operation("GET", "/logs/failures", summary="Executions whose log rows are still to be written", role="viewer",
           query=s.OffsetQuery, response=s.LogFailures)
def list_log_failures(caller: Caller, query: s.OffsetQuery) -> s.LogFailures:
    execution = scheduler_of(current_app).execution
    scope = caller.access.scope()
    count = execution.log_failure_count(scope=scope)
    return s.LogFailures(rows=[execution_out(row) for row in execution.list_log_failures(query.limit, query.offset,
                                                                                          scope)],
                         count=count.value, more=count.more)


@operation("POST", "/logs/repair/<occurrence_id>", summary="Write one execution's log rows from the journal",
           role="operator", response=s.Repaired)
def repair_log(caller: Caller, occurrence_id: s.OccurrenceId) -> s.Repaired:
    result = scheduler_of(current_app).execution.repair_log(occurrence_id, caller.access.scope("operator"))
    if result.repaired:
        caller.audit("log.repair", occurrence_id, before={"log_persistence": LogPersistenceStatus.PENDING},
                     after={"log_persistence": result.log_persistence})
    return s.Repaired(occurrence_id=result.occurrence_id, log_persistence=result.log_persistence,
                      repaired=result.repaired)


@operation("POST", "/logs/repair-all", summary="Write every pending log from the journal (bounded rounds)",
           role="operator", response=s.RepairedAll)
def repair_all_logs(caller: Caller) -> s.RepairedAll:
    execution = scheduler_of(current_app).execution
    scope = caller.access.scope("operator")
    before = execution.log_failure_count(scope=scope)
    result = execution.repair_all(REPAIR_ALL_ROUNDS, scope)
    caller.audit("log.repair_all", "log failures", before={"pending": before.label},
                 after={"repaired": result.repaired, "failed": result.failed, "remaining": result.remaining.label,
                        "rounds": result.rounds}, team=audit_team(scope))
    return s.RepairedAll(repaired=result.repaired, failed=result.failed, remaining=result.remaining.value,
                         remaining_more=result.remaining.more, rounds=result.rounds)


# --- notifications --------------------------------------------------------------------------------


def _delivery(row: QueueRow) -> s.Delivery:
    entry = row.entry
    return s.Delivery(queue_id=entry.queue_id, provider=entry.provider, template=entry.template,
                      status=entry.status, attempt_count=entry.attempt_count, max_attempts=entry.max_attempts,
                      next_attempt_at=entry.next_attempt_at, last_failure=entry.last_failure,
                      message_id=entry.message_id, created_at=entry.created_at, updated_at=entry.updated_at,
                      held_until=row.held_until)


def _entry_audit(entry: Any, expected: int) -> dict[str, Any]:
    return {"status": entry.status, "provider": entry.provider, "template": entry.template,
            "last_failure": entry.last_failure, "attempt_count": entry.attempt_count, "updated_at": expected}


def _existing_entry(caller: Caller, queue_id: s.QueueId) -> Any:
    """The message the caller sees (404 as for none), when they are an operator of its team (403)."""
    entry = reach_of(current_app).queue.get(queue_id, caller.access.scope())
    if entry is None:
        raise not_found(f"no queue entry {queue_id}")
    if not caller.access.may("operator", entry.team):
        where = f"team {entry.team}" if entry.team is not None else "every team (a global role)"
        raise ApiProblem(403, "Forbidden", f"this needs the operator role in {where}", FORBIDDEN_CODE)
    return entry


@operation("GET", "/notifications/dead", summary="Dead letters, newest change first", role="viewer",
           query=s.DeadQuery, response=s.DeliveryPage)
def list_dead(caller: Caller, query: s.DeadQuery) -> s.DeliveryPage:
    page = reach_of(current_app).queue.browse(QueueStatus.DEAD, provider=query.provider, failure=query.failure,
                                              template=query.template, limit=query.limit, after=query.after,
                                              scope=caller.access.scope())
    return s.DeliveryPage(rows=[_delivery(row) for row in page.rows], next_after=page.next_after)


@operation("GET", "/notifications/unknown", summary="Deliveries whose outcome is unknown", role="viewer",
           query=s.UnknownQuery, response=s.DeliveryPage)
def list_unknown_deliveries(caller: Caller, query: s.UnknownQuery) -> s.DeliveryPage:
    page = reach_of(current_app).queue.browse(QueueStatus.UNKNOWN, limit=query.limit, after=query.after,
                                              scope=caller.access.scope())
    return s.DeliveryPage(rows=[_delivery(row) for row in page.rows], next_after=page.next_after)


@operation("POST", "/notifications/requeue/<queue_id>", summary="Requeue a dead letter at the version read",
           role="operator", body=s.Version, response=s.Delivery)
def requeue_dead(caller: Caller, body: s.Version, queue_id: s.QueueId) -> s.Delivery:
    queue = reach_of(current_app).queue
    before = _existing_entry(caller, queue_id)
    after = queue.requeue_dead(queue_id, body.expected_updated_at, caller.access.scope("operator"))
    caller.audit("notification.requeue", queue_id, before=_entry_audit(before, body.expected_updated_at),
                 after={"status": after.status, "attempt_count": after.attempt_count}, team=before.team)
    return _delivery(QueueRow(after, None))


@operation("POST", "/notifications/resolve/<queue_id>",
           summary="Settle an unknown delivery as sent or discarded, at the version read", role="operator",
           body=s.ResolveDelivery, response=s.Delivery)
def resolve_delivery(caller: Caller, body: s.ResolveDelivery, queue_id: s.QueueId) -> s.Delivery:
    status = body.status
    reason = _review(status, tuple(DeliveryResolution), body.reason)
    message_id = (body.message_id or "").strip() or None
    if status == DeliveryResolution.DISCARDED and message_id:
        raise ConfigError("message_id", 'a message id only goes with "sent"')
    queue = reach_of(current_app).queue
    before = _existing_entry(caller, queue_id)
    after = queue.resolve_unknown(queue_id, status, message_id, caller.name, body.expected_updated_at,
                                  caller.access.scope("operator"))
    caller.audit("notification.resolve_unknown", queue_id, before=_entry_audit(before, body.expected_updated_at),
                 after={"status": after.status, "message_id": after.message_id}, reason=reason, team=before.team)
    return _delivery(QueueRow(after, None))


# --- nodes, health --------------------------------------------------------------------------------


@operation("GET", "/nodes", summary="Nodes, their heartbeats and the leases each holds", role="viewer",
           response=s.NodeList)
def list_nodes(caller: Caller) -> s.NodeList:
    scheduler = scheduler_of(current_app)
    leases: dict[str, list[s.Lease]] = defaultdict(list)
    for execution in scheduler.execution.leases(caller.access.scope()):
        leases[execution.owner_node or "?"].append(s.Lease(occurrence_id=execution.occurrence_id,
                                                           task_id=execution.task_id,
                                                           lease_until=execution.lease_until))
    now = scheduler.task_ops.now_ms()
    within = ALIVE_HEARTBEATS * scheduler.config.heartbeat_interval_ms
    return s.NodeList(now_ms=now, rows=[s.Node(
        node_id=node.node_id, host=node.host, pid=node.pid, started_at=node.started_at,
        last_seen_at=node.last_seen_at, stopped_at=node.stopped_at, alive=node.alive(now, within),
        capabilities=list(node.capabilities), groups=list(node.groups), leases=leases.get(node.node_id, []))
        for node in scheduler.nodes()])


@operation("GET", "/health", summary="The database answers and the schema is at head", role="viewer",
           response=s.Health)
def health(caller: Caller) -> s.Health:
    engine = current_app.extensions["hai_engine"]
    try:
        now_ms = health_check(engine)
        state = migration_state(engine)
    except SchedulerError:
        return s.Health(status="unavailable", database_clock_ms=None, schema_revision=None)
    return s.Health(status="ok" if state.up_to_date else "migrations_pending", database_clock_ms=now_ms,
                    schema_revision=state.current)
