"""Forms that help (#14): a refused form shows again what was just typed -- a new secret
included, a stored secret never --, the cron error names its field, a refused resolution keeps
its reason, and each destructive step asks once."""

from __future__ import annotations

import html
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from tests.webapp.conftest import Auth, csrf_token
from tests.webapp.test_executions import _resolve, _unknown_execution
from tests.webapp.test_tasks import API_FORM, SECRETS, _field_error, _form_values, _post, _scheduler, _text


def test_a_refused_new_task_shows_the_secrets_just_typed(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    response = _post(client, "/tasks/new", {**API_FORM, "cron": "every day"})
    page = _text(response)
    assert response.status_code == 400 and _scheduler(app).task_ops.search("").rows == []
    shown = _form_values(page, "/tasks/new")
    for name in ("url", "headers", "params", "body", "name", "timezone"):
        assert shown[name] == API_FORM[name], name  # nothing to type again, secrets included
    assert "Bearer s3cr3t-header" in shown["headers"] and "hunter2-url" in shown["url"]


def test_a_refused_edit_shows_what_was_typed_and_never_a_stored_secret(app: Flask, client: FlaskClient,
                                                                       auth: Auth) -> None:
    auth.login()
    assert _post(client, "/tasks/new", API_FORM).status_code == 303
    stored = _scheduler(app).task_ops.get("billing")
    form = _form_values(_text(client.get("/tasks/edit/billing")), "/tasks/edit/billing")
    assert "Authorization: ***" in form["headers"]  # stored secrets are masked on the form
    form["headers"] += "\nX-Api-Key: typed-just-now-7"
    response = _post(client, "/tasks/edit/billing", {**form, "cron": "61 * * * *"})
    page = _text(response)
    assert response.status_code == 400
    shown = _form_values(page, "/tasks/edit/billing")
    assert "X-Api-Key: typed-just-now-7" in shown["headers"]  # the new secret survives the error
    assert "Authorization: ***" in shown["headers"] and shown["url"] == form["url"]
    for secret in SECRETS:  # the stored ones never reach the page
        assert secret not in page
    assert _scheduler(app).task_ops.get("billing") == stored


def test_the_cron_error_names_the_field(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    page = html.unescape(_text(_post(client, "/tasks/new", {**API_FORM, "cron": "every day"})))
    assert _field_error(page, "cron").startswith("Cron expression: 'every day' has 2 fields")
    preview = html.unescape(_text(client.get("/tasks/cron-preview?cron=61+*+*+*+*&timezone=UTC")))
    assert "Cron expression: '61 * * * *' is not a valid expression" in preview


def test_a_resolution_without_a_status_keeps_the_reason(app: Flask, client: FlaskClient, auth: Auth) -> None:
    unknown = _unknown_execution(app)
    auth.login()
    reason = "Checked the payment provider: no charge was made <for this run>."
    refused = _resolve(client, unknown.occurrence_id, reason=reason, expected_updated_at=unknown.updated_at)
    page = _text(refused)
    assert refused.status_code == 400
    card = page.split(unknown.occurrence_id, 1)[1]
    assert html.escape(reason, quote=False) in card and "Choose success or discarded." in html.unescape(card)
    chosen = _resolve(client, unknown.occurrence_id, status="discarded", reason=" ",
                      expected_updated_at=unknown.updated_at)
    assert 'value="discarded" checked' in _text(chosen)  # the choice is kept when the reason is missing
    assert "checked" not in _text(client.get("/executions/unknown")).split("Resolve as", 1)[1].split("</fieldset>")[0]
    assert app.extensions["hai_scheduler"].execution.get(unknown.occurrence_id).status == "unknown"


def _confirmations(page: str) -> int:
    return page.count("data-confirm=")


def test_disable_asks_once_and_delete_asks_once(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    assert _post(client, "/tasks/new", API_FORM).status_code == 303
    detail = _text(client.get("/tasks/view/billing"))
    disable: Any = detail.split('action="/tasks/disable/billing"', 1)[1].split("</form>", 1)[0]
    assert _confirmations(disable) == 1  # a dialog before the task stops running
    delete_link = detail.split('href="/tasks/delete/billing"', 1)
    assert len(delete_link) == 2 and "data-confirm" not in delete_link[1].split("</a>", 1)[0]
    confirm_page = _text(client.get("/tasks/delete/billing"))
    assert _confirmations(confirm_page) == 0  # the page is the question: no dialog on top of it
    token = csrf_token(client, "/tasks/")
    version = _scheduler(app).task_ops.get("billing").updated_at
    deleted = client.post("/tasks/delete/billing", data={"csrf_token": token, "expected_updated_at": version})
    assert deleted.status_code == 303
