"""What a form posts is parsed at the boundary, on every database: a version that is no unix ms
(40 digits, 2**63, negative) is a 400 naming ``expected_updated_at``, never a 500 or a conflict,
and changes nothing."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from tests.webapp.conftest import Auth, csrf_token
from tests.webapp.test_route_walk import _changed, _snapshot
from webapp.node import accounts_of, reach_of, scheduler_of

HUGE_VERSIONS = ("9" * 40, str(2**63), str(2**53), "-1")


def _rows(app: Flask) -> dict[str, str]:
    """A task, an occurrence, a stored template and a user: what the versioned forms act on."""
    scheduler = scheduler_of(app)
    scheduler.set_hooks({"on_task_execute": lambda event: "ok"})
    scheduler.register(TaskDefinition(id="t", name="T", cron="0 2 * * *", handler={"kind": "hook"}))
    occurrence = scheduler.trigger("t").occurrence_id
    reach_of(app).templates.create("tpl", "log", "Hello {name}")
    accounts_of(app).create("member", "viewer", generate_password_hash("member-password"))
    return {"occurrence": occurrence, "queue": str(uuid.uuid4())}


def _versioned_forms(rows: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Every form that carries a version, with otherwise valid fields."""
    task = {"name": "T", "cron": "0 3 * * *", "timezone": "UTC", "kind": "hook", "retry_max_attempts": "1"}
    resolve = {"status": "success", "reason": "checked the target"}
    return {
        f"/executions/{rows['occurrence']}/resolve": resolve,
        f"/notifications/dead/{rows['queue']}/requeue": {},
        f"/notifications/unknown/{rows['queue']}/resolve": {"status": "sent", "reason": "checked"},
        "/notifications/templates/edit/tpl": {"provider": "log", "body": "Hi {name}"},
        "/notifications/templates/delete/tpl": {},
        "/tasks/edit/t": task,
        "/tasks/enable/t": {},
        "/tasks/disable/t": {},
        "/tasks/delete/t": {},
        "/users/role/member": {"role": "operator"},
        "/users/disable/member": {},
        "/users/enable/member": {},
        "/users/password/member": {"password": "a-new-password", "confirm": "a-new-password"},
    }


@pytest.mark.parametrize("version", HUGE_VERSIONS, ids=("40-digits", "2**63", "2**53", "negative"))
def test_a_version_that_is_no_unix_ms_is_a_400_naming_the_field(db_app: Flask, version: str) -> None:
    client: FlaskClient = db_app.test_client()
    assert Auth(client).login().status_code == 302
    forms = _versioned_forms(_rows(db_app))
    token = csrf_token(client, "/")
    problems = []
    for path, form in forms.items():
        before = _snapshot(db_app)
        response = client.post(path, data={**form, "expected_updated_at": version, "csrf_token": token})
        text = response.get_data(as_text=True)
        if response.status_code != 400 or "expected_updated_at" not in text:
            problems.append(f"{path}: {response.status_code}, field named: {'expected_updated_at' in text}")
        problems += [f"{path} changed {change}" for change in _changed(before, _snapshot(db_app))]
    assert not problems, "\n".join(problems)
