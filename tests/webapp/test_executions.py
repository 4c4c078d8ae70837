"""Executions pages: filters, the unknown review queue, and resolving with a CAS and a reason."""

from __future__ import annotations

from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from tests.helpers.journal import abandon_running_execution, wait_for_status
from tests.webapp.conftest import Auth, csrf_token


def _unknown_execution(app: Flask) -> Any:
    scheduler = app.extensions["hai_scheduler"]
    scheduler.register(TaskDefinition(id="billing", name="Billing", cron="0 2 * * *"))
    occurrence = abandon_running_execution(scheduler.engine, "billing", started=True)
    scheduler.start()  # its expiry scan isolates the abandoned execution
    try:
        return wait_for_status(scheduler, occurrence, "unknown")
    finally:
        scheduler.stop()


def _resolve(client: FlaskClient, occurrence: str, **form: Any) -> Any:
    token = csrf_token(client, "/executions/unknown")
    return client.post(f"/executions/{occurrence}/resolve", data={"csrf_token": token, **form})


def test_list_and_filters(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = app.extensions["hai_scheduler"]
    scheduler.set_hooks({"on_task_execute": lambda e: "ok"})
    scheduler.register(TaskDefinition(id="report", name="Report", cron="0 2 * * *"))
    log = scheduler.trigger("report", source="dashboard-test")
    auth.login()
    page = client.get("/executions/?status=success")
    assert page.status_code == 200 and log.occurrence_id in page.get_data(as_text=True)
    assert log.occurrence_id not in client.get("/executions/?status=failed").get_data(as_text=True)
    fragment = client.get("/executions/?task=report", headers={"HX-Request": "true"})
    assert "<html" not in fragment.get_data(as_text=True) and log.occurrence_id in fragment.get_data(as_text=True)
    assert "HX-Request" in fragment.headers["Vary"]


def test_resolve_unknown_with_reason_and_version(app: Flask, client: FlaskClient, auth: Auth) -> None:
    unknown = _unknown_execution(app)
    auth.login()
    page = client.get("/executions/unknown").get_data(as_text=True)
    assert unknown.occurrence_id in page and f'value="{unknown.updated_at}"' in page
    missing_reason = _resolve(client, unknown.occurrence_id, status="discarded", reason=" ",
                              expected_updated_at=unknown.updated_at)
    assert missing_reason.status_code == 400 and "A reason is required" in missing_reason.get_data(as_text=True)
    stale = _resolve(client, unknown.occurrence_id, status="discarded", reason="checked the ledger",
                     expected_updated_at=unknown.updated_at - 1)
    assert stale.status_code == 303
    assert "changed since the page was loaded" in client.get("/executions/unknown").get_data(as_text=True)
    scheduler = app.extensions["hai_scheduler"]
    assert scheduler.execution.get(unknown.occurrence_id).status == "unknown"  # nothing changed
    done = _resolve(client, unknown.occurrence_id, status="discarded", reason="checked the ledger",
                    expected_updated_at=unknown.updated_at)
    assert done.status_code == 303
    resolved = scheduler.execution.get(unknown.occurrence_id)
    assert (resolved.status, resolved.resolved_by, resolved.resolution_reason) == (
        "discarded", "admin", "checked the ledger")
    [entry] = scheduler.audit.list(action="execution.resolve_unknown")
    assert (entry.actor, entry.target, entry.before, entry.after, entry.reason) == (
        "admin", unknown.occurrence_id, {"status": "unknown"}, {"status": "discarded"}, "checked the ledger")


def test_viewer_cannot_resolve(app: Flask, client: FlaskClient, auth: Auth) -> None:
    unknown = _unknown_execution(app)
    app.extensions["hai_scheduler"].users.create("viewer1", "viewer", generate_password_hash("viewer-pw-1"))
    auth.login("viewer1", "viewer-pw-1")
    assert "Resolve as" not in client.get("/executions/unknown").get_data(as_text=True)
    refused = _resolve(client, unknown.occurrence_id, status="discarded", reason="x",
                       expected_updated_at=unknown.updated_at)
    assert refused.status_code == 403
    assert app.extensions["hai_scheduler"].execution.get(unknown.occurrence_id).status == "unknown"
