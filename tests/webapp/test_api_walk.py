"""Every operation the OpenAPI document lists, driven with a token of each role, on SQLite,
PostgreSQL and MariaDB:

- without a token, and with only a signed-in admin's session cookie: 401, nothing changed;
- with the token of each role below the one it needs: 403, nothing changed;
- with the token of the role it needs: the documented success status and a body the
  document's response schema describes.

REQUESTS says how to call each operation (making the rows it acts on first); the first test
fails when the document lists an operation REQUESTS does not drive, so every documented
operation is exercised here (the coverage check of issue #16).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from flask import Flask

from scheduler_core.runtime.accounts import ROLES
from tests.webapp.api_support import (
    WALK,
    Api,
    assert_problem,
    delivery,
    make_api,
    pending_log,
    snapshot,
    unknown_execution,
)
from tests.webapp.conftest import Auth
from webapp.api import OPERATIONS
from webapp.api.core import Operation
from webapp.api.openapi import document
from webapp.node import scheduler_of

Request = tuple[str, Any]  # path, JSON body (None: no body)


def _version(api: Api, task_id: str = "walk") -> int:
    return int(scheduler_of(api.app).task_ops.get(task_id).updated_at or 0)


def _paused(api: Api, paused: bool) -> None:
    scheduler = scheduler_of(api.app)
    if paused and scheduler.task_ops.get("walk").paused is None:
        scheduler.pause("walk", reason="walk", by="test")
    if not paused and scheduler.task_ops.get("walk").paused is not None:
        scheduler.resume("walk")


def _doomed(api: Api) -> Request:
    task = scheduler_of(api.app).register(replace(WALK, id=f"doomed-{uuid.uuid4().hex[:8]}"))
    return f"/api/v1/tasks/{task.id}", {"expected_updated_at": task.updated_at}


def _resolve(api: Api) -> Request:
    row = unknown_execution(api)
    return f"/api/v1/executions/resolve/{row.occurrence_id}", {
        "status": "discarded", "reason": "checked the ledger", "expected_updated_at": row.updated_at}


def _requeue(api: Api) -> Request:
    entry = delivery(api, "dead")
    return f"/api/v1/notifications/requeue/{entry.queue_id}", {"expected_updated_at": entry.updated_at}


def _resolve_delivery(api: Api) -> Request:
    entry = delivery(api, "unknown")
    return f"/api/v1/notifications/resolve/{entry.queue_id}", {
        "status": "sent", "reason": "the provider's console shows it", "message_id": "m-1",
        "expected_updated_at": entry.updated_at}


def _pause(api: Api) -> Request:
    _paused(api, False)
    return "/api/v1/tasks/pause/walk", {"reason": "maintenance window", "minutes": 30}


def _resume(api: Api) -> Request:
    _paused(api, True)
    return "/api/v1/tasks/resume/walk", None


def _backfill(api: Api) -> Request:
    now = scheduler_of(api.app).task_ops.now_ms()
    return "/api/v1/tasks/backfill/walk", {"start_ms": now - 3 * 3_600_000, "end_ms": now - 3_600_000,
                                           "reason": "the walk's outage"}


REQUESTS: dict[str, Callable[[Api], Request]] = {
    "list_tasks": lambda api: ("/api/v1/tasks?q=walk&limit=10", None),
    "get_task": lambda api: ("/api/v1/tasks/walk", None),
    "describe_task": lambda api: ("/api/v1/schedules/walk", None),
    "create_task": lambda api: ("/api/v1/tasks", {"id": f"new-{uuid.uuid4().hex[:8]}", "name": "New",
                                                  "cron": "*/5 * * * *", "handler": {"kind": "hook"}}),
    "update_task": lambda api: ("/api/v1/tasks/walk", {"expected_updated_at": _version(api),
                                                       "description": f"edited {uuid.uuid4().hex[:6]}"}),
    "delete_task": _doomed,
    "pause_task": _pause,
    "resume_task": _resume,
    "trigger_task": lambda api: ("/api/v1/tasks/trigger/walk", {"idempotency_key": str(uuid.uuid4())}),
    "backfill_task": _backfill,
    "list_executions": lambda api: ("/api/v1/executions?status=unknown&limit=5", None),
    "get_execution": lambda api: (f"/api/v1/executions/{unknown_execution(api).occurrence_id}", None),
    "resolve_execution": _resolve,
    "list_logs": lambda api: ("/api/v1/logs?limit=5", None),
    "list_log_failures": lambda api: ("/api/v1/logs/failures?limit=5", None),
    "repair_log": lambda api: (f"/api/v1/logs/repair/{pending_log(api)}", None),
    "repair_all_logs": lambda api: ("/api/v1/logs/repair-all", None),
    "list_dead": lambda api: ("/api/v1/notifications/dead?limit=5", None),
    "list_unknown_deliveries": lambda api: ("/api/v1/notifications/unknown", None),
    "requeue_dead": _requeue,
    "resolve_delivery": _resolve_delivery,
    "list_nodes": lambda api: ("/api/v1/nodes", None),
    "health": lambda api: ("/api/v1/health", None),
}


@pytest.fixture
def api(db_app: Flask) -> Api:
    return make_api(db_app)


def test_every_documented_operation_is_driven_here() -> None:
    documented = {op["operationId"] for path in document()["paths"].values() for op in path.values()}
    assert documented == {op.endpoint for op in OPERATIONS}
    assert documented == set(REQUESTS), (f"documented, not driven: {sorted(documented - set(REQUESTS))}; "
                                         f"driven, not documented: {sorted(set(REQUESTS) - documented)}")


def _refused(api: Api, op: Operation, path: str, body: Any, admin_cookie: Any) -> list[str]:
    """Every refusal of one call; each must change nothing."""
    problems, method = [], op.method
    attempts: list[tuple[str, Any, int]] = [("no token", lambda: api.call(method, path, None, body), 401),
                                            ("session cookie", lambda: admin_cookie.open(
                                                path, method=method, json=body), 401)]
    attempts += [(f"{role} token", lambda role=role: api.call(method, path, role, body), 403)
                 for role in ROLES[:ROLES.index(op.role)]]
    for what, send, status in attempts:
        before = snapshot(api.app)
        response = send()
        if response.status_code != status:
            problems.append(f"{method} {path} with {what}: {response.status_code}, not {status}")
        else:
            assert_problem(response, status)
        if snapshot(api.app) != before:
            problems.append(f"{method} {path} with {what} changed the database")
    return problems


def test_every_operation_refuses_below_its_role_and_answers_at_it(api: Api, db_app: Flask) -> None:
    admin_cookie = db_app.test_client()
    assert Auth(admin_cookie).login().status_code == 302
    problems = []
    for op in OPERATIONS:
        path, body = REQUESTS[op.endpoint](api)
        problems += _refused(api, op, path, body, admin_cookie)
        response = api.call(op.method, path, op.role, body)
        if response.status_code != op.status:
            problems.append(f"{op.method} {path} as {op.role}: {response.status_code} "
                            f"{response.get_data(as_text=True)[:300]}")
            continue
        op.response.model_validate(response.get_json())  # the body is what the document says
        assert response.headers["Cache-Control"] == "no-store"
    assert not problems, "\n".join(problems)
