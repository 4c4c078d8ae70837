"""What the JSON API does, on SQLite, PostgreSQL and MariaDB: the same runtime calls, rules and
audit trail as the pages -- masked secrets that round-trip, compare-and-set (409 on a stale
version), the same validation as the forms (the same code and field), idempotent triggers,
the unknown review, log repair, the notification queue."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

from scheduler_core.errors import ConfigError
from tests.helpers.fault_cluster import wait_for
from tests.webapp.api_support import Api, assert_problem, delivery, make_api, pending_log, unknown_execution
from tests.webapp.conftest import Auth, csrf_token
from webapp.node import audit_of, reach_of, scheduler_of

SECRET_TASK = {"id": "billing/nightly", "name": "Billing", "cron": "0 3 * * *", "timezone": "Europe/Berlin",
               "handler": {"kind": "api", "url": "https://robot:url-pass-1@billing.example/run", "method": "POST",
                           "headers": {"Authorization": "Bearer header-secret-1", "X-Trace": "on"}},
               "params": {"api_key": "param-secret-1", "region": "eu"}, "retry": {"max_attempts": 3,
                                                                                  "backoff_ms": [1000, 5000]}}


@pytest.fixture
def api(db_app: Flask) -> Api:
    return make_api(db_app)


def _audit(api: Api, action: str) -> list[Any]:
    entries: list[Any] = audit_of(api.app).list(action=action)
    return entries


def _via(entry: Any, role: str = "admin") -> None:
    assert entry.after["via"] == "api" and entry.after["token_name"] == f"{role}-token"


def test_a_task_round_trip_keeps_secrets_masked_and_stored(api: Api) -> None:
    created = api.call("POST", "/api/v1/tasks", body=SECRET_TASK)
    assert created.status_code == 201, created.get_data(as_text=True)
    shown = created.get_data(as_text=True)
    assert not any(secret in shown for secret in ("url-pass-1", "header-secret-1", "param-secret-1"))
    task = api.call("GET", "/api/v1/tasks/billing/nightly", "viewer").get_json()
    assert task["handler"]["headers"]["Authorization"] == "***" and task["params"]["api_key"] == "***"
    assert task["retry"] == {"max_attempts": 3, "backoff_ms": [1000, 5000]}
    # the definition as read, sent back with one change: the masked secrets stay as stored
    changed = api.call("PATCH", "/api/v1/tasks/billing/nightly", body={
        "expected_updated_at": task["updated_at"], "handler": task["handler"], "params": task["params"],
        "description": "nightly billing run"})
    assert changed.status_code == 200, changed.get_data(as_text=True)
    stored = scheduler_of(api.app).task_ops.get("billing/nightly")
    assert stored.handler is not None and stored.handler["headers"]["Authorization"] == "Bearer header-secret-1"
    assert stored.handler["url"] == "https://robot:url-pass-1@billing.example/run"
    assert stored.params == {"api_key": "param-secret-1", "region": "eu"}
    assert stored.description == "nightly billing run"
    [create], [update] = _audit(api, "task.create"), _audit(api, "task.update")
    assert create.actor == update.actor == "admin" and create.target == "billing/nightly"
    _via(create), _via(update)
    assert "param-secret-1" not in str(create.after) + str(update.before) + str(update.after)


def test_a_stale_version_is_409_and_changes_nothing(api: Api) -> None:
    version = api.call("GET", "/api/v1/tasks/walk").get_json()["updated_at"]
    assert api.call("PATCH", "/api/v1/tasks/walk", body={"expected_updated_at": version,
                                                         "name": "First"}).status_code == 200
    stale = api.call("PATCH", "/api/v1/tasks/walk", body={"expected_updated_at": version, "name": "Second"})
    assert_problem(stale, 409, "hai:scheduler:033", "expected_updated_at")
    assert_problem(api.call("DELETE", "/api/v1/tasks/walk", body={"expected_updated_at": version}), 409)
    assert scheduler_of(api.app).task_ops.get("walk").name == "First"
    current = scheduler_of(api.app).task_ops.get("walk").updated_at
    deleted = api.call("DELETE", "/api/v1/tasks/walk", body={"expected_updated_at": current})
    assert deleted.status_code == 200 and deleted.get_json() == {"id": "walk", "deleted": True}
    assert_problem(api.call("GET", "/api/v1/tasks/walk"), 404, "hai:scheduler:020")
    assert [e.target for e in _audit(api, "task.delete")] == ["walk"]


def test_the_api_refuses_what_the_form_refuses_with_the_same_code_and_field(api: Api, db_app: Flask) -> None:
    browser = db_app.test_client()
    Auth(browser).login()
    form = {"id": "tz", "name": "Tz", "cron": "0 3 * * *", "timezone": "Mars/Olympus", "kind": "hook",
            "retry_max_attempts": "1", "csrf_token": csrf_token(browser, "/tasks/new")}
    page = browser.post("/tasks/new", data=form)
    assert page.status_code == 400 and "Mars/Olympus" in page.get_data(as_text=True)
    answer = api.call("POST", "/api/v1/tasks", body={"id": "tz", "name": "Tz", "cron": "0 3 * * *",
                                                     "timezone": "Mars/Olympus"})
    with pytest.raises(ConfigError) as core:
        scheduler_of(api.app).task_ops.preview("0 3 * * *", "Mars/Olympus")
    assert_problem(answer, 422, core.value.code, "timezone")
    cases = [
        ({"cron": "61 * * * *"}, "hai:scheduler:022", "cron"),
        ({"handler": {"kind": "python", "code": "print(1)"}}, "hai:scheduler:012", "handler.kind"),
        ({"handler": {"kind": "api", "url": "ftp://x", "method": "POST"}}, "hai:scheduler:012", "handler.url"),
        ({"retry": {"max_attempts": 0}}, "hai:scheduler:012", "retry.max_attempts"),
        ({"params": {"k": "a\x00b"}}, "hai:scheduler:012", "params.k"),
        ({"id": "a/../b"}, "hai:scheduler:012", "id"),
        ({"name": 5}, "hai:scheduler:012", "name"),
        ({"enabled": "yes"}, "hai:scheduler:012", "enabled"),
        ({"unknown": 1}, "hai:scheduler:012", "unknown"),
    ]
    for change, code, field in cases:
        body = {"id": "bad", "name": "Bad", "cron": "0 3 * * *", **change}
        assert_problem(api.call("POST", "/api/v1/tasks", body=body), 422, code, field)
    assert_problem(api.call("POST", "/api/v1/tasks", body={**SECRET_TASK, "id": "walk"}), 409, "hai:scheduler:021")
    assert [t.id for t in scheduler_of(api.app).refresh_tasks()] == ["walk"]
    assert _audit(api, "task.create") == []


def test_search_pages_with_cursors(api: Api) -> None:
    for n in range(5):
        assert api.call("POST", "/api/v1/tasks", body={"id": f"page-{n}", "name": f"P{n}", "cron": "0 1 * * *",
                                                       "enabled": n % 2 == 0}).status_code == 201
    first = api.call("GET", "/api/v1/tasks?q=enabled:true%20P&limit=2", "viewer").get_json()
    assert [r["id"] for r in first["rows"]] == ["page-0", "page-2"] and first["prev_before"] is None
    second = api.call("GET", f"/api/v1/tasks?q=enabled:true%20P&limit=2&after={first['next_after']}").get_json()
    assert [r["id"] for r in second["rows"]] == ["page-4"] and second["next_after"] is None
    back = api.call("GET", f"/api/v1/tasks?q=enabled:true%20P&limit=2&before={second['prev_before']}").get_json()
    assert [r["id"] for r in back["rows"]] == ["page-0", "page-2"]
    assert_problem(api.call("GET", "/api/v1/tasks?q=colour:red"), 422, "hai:scheduler:012", "q")
    assert_problem(api.call("GET", "/api/v1/tasks?limit=101"), 422, field="limit")
    assert_problem(api.call("GET", "/api/v1/tasks?limit=5&limit=6"), 422, field="limit")
    assert_problem(api.call("GET", "/api/v1/tasks?colour=red"), 422, field="colour")


def test_trigger_with_an_idempotency_key_returns_the_same_occurrence(api: Api) -> None:
    first = api.call("POST", "/api/v1/tasks/trigger/walk", "operator", {"idempotency_key": "deploy-42"})
    again = api.call("POST", "/api/v1/tasks/trigger/walk", "operator", {"idempotency_key": "deploy-42"})
    assert first.status_code == again.status_code == 202
    assert first.get_json()["occurrence_id"] == again.get_json()["occurrence_id"]
    assert (first.get_json()["existing"], again.get_json()["existing"]) == (False, True)
    execution = api.call("GET", f"/api/v1/executions/{first.get_json()['occurrence_id']}", "viewer").get_json()
    assert execution["task_id"] == "walk" and execution["source"] == "api:operator1"
    assert isinstance(execution["attempts"], list)
    triggers = _audit(api, "task.trigger")
    assert [e.actor for e in triggers] == ["operator1", "operator1"]
    _via(triggers[0], "operator")
    assert_problem(api.call("POST", "/api/v1/tasks/trigger/nope", "operator", {}), 404, "hai:scheduler:020")


def test_pause_and_resume(api: Api) -> None:
    assert_problem(api.call("POST", "/api/v1/tasks/pause/walk", "operator", {"reason": " "}), 422, field="reason")
    assert_problem(api.call("POST", "/api/v1/tasks/pause/walk", "operator", {"reason": "x", "minutes": 10081}),
                   422, field="minutes")
    paused = api.call("POST", "/api/v1/tasks/pause/walk", "operator", {"reason": "db maintenance", "minutes": 60})
    assert paused.status_code == 200 and paused.get_json()["paused"]["by"] == "operator1"
    # already paused: the task's state, not the input, refuses it (409, as any action on a row in another state)
    assert_problem(api.call("POST", "/api/v1/tasks/pause/walk", "operator", {"reason": "again"}), 409, "hai:api:409",
                   "task_id")
    resumed = api.call("POST", "/api/v1/tasks/resume/walk", "operator")
    assert resumed.status_code == 200 and resumed.get_json()["paused"] is None
    [pause] = _audit(api, "task.pause")
    assert pause.reason == "db maintenance" and pause.actor == "operator1"


def test_resolving_an_unknown_execution_needs_a_reason_and_the_version(api: Api) -> None:
    row = unknown_execution(api)
    path = f"/api/v1/executions/resolve/{row.occurrence_id}"
    assert_problem(api.call("POST", path, "operator", {"status": "success", "reason": "  ",
                                                       "expected_updated_at": row.updated_at}), 422, field="reason")
    assert_problem(api.call("POST", path, "operator", {"status": "maybe", "reason": "x",
                                                       "expected_updated_at": row.updated_at}), 422, field="status")
    assert_problem(api.call("POST", path, "operator", {"status": "success", "reason": "checked",
                                                       "expected_updated_at": row.updated_at - 1}), 409)
    done = api.call("POST", path, "operator", {"status": "success", "reason": "checked the ledger",
                                               "expected_updated_at": row.updated_at})
    assert done.status_code == 200 and done.get_json()["status"] == "success"
    assert done.get_json()["resolved_by"] == "operator1"
    assert_problem(api.call("POST", path, "operator", {"status": "success", "reason": "again",
                                                       "expected_updated_at": done.get_json()["updated_at"]}), 409)
    [entry] = _audit(api, "execution.resolve_unknown")
    assert (entry.actor, entry.before, entry.reason) == ("operator1", {"status": "unknown"}, "checked the ledger")
    listed = api.call("GET", "/api/v1/executions?status=success&task_id=walk", "viewer").get_json()
    assert row.occurrence_id in [r["occurrence_id"] for r in listed["rows"]]


def test_log_repair(api: Api) -> None:
    occurrence = pending_log(api)
    failures = api.call("GET", "/api/v1/logs/failures", "viewer").get_json()
    assert [r["occurrence_id"] for r in failures["rows"]] == [occurrence] and failures["count"] == 1
    repaired = api.call("POST", f"/api/v1/logs/repair/{occurrence}", "operator")
    assert repaired.get_json() == {"occurrence_id": occurrence, "log_persistence": "persisted", "repaired": True}
    again = api.call("POST", f"/api/v1/logs/repair/{occurrence}", "operator")
    assert again.get_json()["repaired"] is False
    assert len(_audit(api, "log.repair")) == 1  # the second found nothing to do: nothing audited
    logs = api.call("GET", f"/api/v1/logs?task_id={failures['rows'][0]['task_id']}", "viewer").get_json()
    assert [r["occurrence_id"] for r in logs["rows"]] == [occurrence] and logs["rows"][0]["error"] == "boom"
    assert_problem(api.call("POST", "/api/v1/logs/repair/nope", "operator"), 404, "hai:scheduler:034")
    assert_problem(api.call("GET", "/api/v1/logs?started_after=5&started_before=-1"), 422, field="started_before")


def test_dead_letters_and_unknown_deliveries(api: Api) -> None:
    dead, unknown = delivery(api, "dead"), delivery(api, "unknown")
    listed = api.call("GET", "/api/v1/notifications/dead?provider=log", "viewer").get_json()
    assert [r["queue_id"] for r in listed["rows"]] == [dead.queue_id]
    assert "secret body text" not in str(listed) and "someone@example.com" not in str(listed)
    stale = api.call("POST", f"/api/v1/notifications/requeue/{dead.queue_id}", "operator",
                     {"expected_updated_at": dead.updated_at - 1})
    assert_problem(stale, 409)
    requeued = api.call("POST", f"/api/v1/notifications/requeue/{dead.queue_id}", "operator",
                        {"expected_updated_at": dead.updated_at})
    assert requeued.status_code == 200 and requeued.get_json()["status"] == "pending"
    assert_problem(api.call("POST", "/api/v1/notifications/requeue/0c6f4a2e-0000-4000-8000-000000000000",
                            "operator", {"expected_updated_at": 1}), 404)
    path = f"/api/v1/notifications/resolve/{unknown.queue_id}"
    assert_problem(api.call("POST", path, "operator", {"status": "discarded", "reason": "x", "message_id": "m",
                                                       "expected_updated_at": unknown.updated_at}), 422,
                   field="message_id")
    resolved = api.call("POST", path, "operator", {"status": "sent", "reason": "seen in the provider's console",
                                                   "message_id": "m-7", "expected_updated_at": unknown.updated_at})
    assert resolved.status_code == 200 and resolved.get_json()["message_id"] == "m-7"
    assert reach_of(api.app).queue.get(unknown.queue_id).status == "sent"  # type: ignore[union-attr]
    assert [e.actor for e in _audit(api, "notification.requeue") + _audit(api, "notification.resolve_unknown")] == [
        "operator1", "operator1"]


def test_nodes_health_and_unknown_routes(api: Api) -> None:
    scheduler = scheduler_of(api.app)
    scheduler.start()
    try:
        wait_for(lambda: scheduler.nodes(), "the node's first heartbeat", timeout=30)
        nodes = api.call("GET", "/api/v1/nodes", "viewer").get_json()
    finally:
        scheduler.stop()
    [node] = nodes["rows"]
    assert node["node_id"] == scheduler.config.node_id and node["alive"] and "hook" in node["capabilities"]
    assert api.call("GET", "/api/v1/health", "viewer").get_json()["status"] == "ok"
    assert_problem(api.call("GET", "/api/v1/nothing-here"), 404, "hai:api:404")
    assert_problem(api.call("PUT", "/api/v1/tasks"), 405, "hai:api:405")
