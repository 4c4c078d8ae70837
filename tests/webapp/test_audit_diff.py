"""The audit trail reads as a diff (field: old → new), never escaped JSON, with secrets masked;
and a task's params are capped at 64 KiB of JSON by the core, so the library and the dashboard
refuse a bigger one alike, naming ``params``."""

from __future__ import annotations

import json
import re

import pytest
from flask import Flask
from flask.testing import FlaskClient

from scheduler_core import TaskDefinition
from scheduler_core.errors import ConfigError
from scheduler_core.validation import PARAMS_MAX_BYTES
from tests.webapp.conftest import Auth
from tests.webapp.test_tasks import API_FORM, SECRETS, _form_values, _post
from webapp.audit import audit_changes
from webapp.node import audit_of, scheduler_of


def _big_params(size: int) -> dict[str, str]:
    return {"blob": "x" * (size - len('{"blob":""}'))}


def test_an_edit_reads_as_field_old_new_with_secrets_masked(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    assert _post(client, "/tasks/new", API_FORM).status_code == 303
    form = _form_values(client.get("/tasks/edit/billing").get_data(as_text=True), "/tasks/edit/billing")
    form.update(cron="0 3 * * *", params='{"token": "p4ram-token", "channel": "night-ops"}')
    assert _post(client, "/tasks/edit/billing", form).status_code == 303
    page = client.get("/audit/?action=task.update").get_data(as_text=True)
    assert "<code>cron</code>: <del>30 2 * * 1-5</del> → <ins>0 3 * * *</ins>" in page
    assert "<code>params.channel</code>: <del>ops</del> → <ins>night-ops</ins>" in page
    assert "<code>name</code>" not in page  # unchanged fields are left out
    assert "{&#34;" not in page and "&#34;cron&#34;" not in page  # no escaped JSON
    for secret in SECRETS:
        assert secret not in page
    created = client.get("/audit/?action=task.create").get_data(as_text=True)
    assert "<code>cron</code>: <ins>30 2 * * 1-5</ins>" in created
    assert "<code>handler.headers.Authorization</code>: <ins>***</ins>" in created


def test_changes_are_masked_cut_and_say_what_was_added_or_removed() -> None:
    changes = audit_changes({"status": "unknown", "url": "https://u:pw1234@h.example/x", "gone": 1},
                            {"status": "discarded", "url": "https://u:pw5678@h.example/y", "token": "t0k3n",
                             "long": "y" * 500})
    shown = {c.field: (c.old, c.new) for c in changes}
    assert shown["status"] == ("unknown", "discarded") and shown["gone"] == ("1", None)
    assert shown["url"] == ("https://u:***@h.example/x", "https://u:***@h.example/y")
    assert shown["token"] == (None, "***") and len(shown["long"][1] or "") == 200
    assert audit_changes(None, None) == [] and audit_changes({"a": 1}, {"a": 1}) == []


def test_params_over_64_kib_are_refused_by_the_library(app: Flask) -> None:
    scheduler = scheduler_of(app)
    scheduler.register(TaskDefinition(id="fits", name="Fits", cron="0 2 * * *", params=_big_params(PARAMS_MAX_BYTES)))
    with pytest.raises(ConfigError) as refused:
        scheduler.register(TaskDefinition(id="huge", name="Huge", cron="0 2 * * *",
                                          params=_big_params(PARAMS_MAX_BYTES + 1)))
    assert refused.value.field == "params" and "65,536 bytes" in refused.value.message
    with pytest.raises(ConfigError) as updated:
        scheduler.update_task("fits", params=_big_params(PARAMS_MAX_BYTES + 1))
    assert updated.value.field == "params"
    assert len(json.dumps(scheduler_of(app).task_ops.get("fits").params, separators=(",", ":"))) == PARAMS_MAX_BYTES


def test_params_over_64_kib_are_refused_by_the_dashboard(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    answer = _post(client, "/tasks/new", {**API_FORM, "params": json.dumps(_big_params(PARAMS_MAX_BYTES + 10))})
    page = answer.get_data(as_text=True)
    assert answer.status_code == 400
    message = re.search(r'id="params-error">([^<]*)<', page)
    assert message and "65,536 bytes" in message.group(1)
    assert "billing" not in {task.id for task in scheduler_of(app).refresh_tasks()}
    assert audit_of(app).list(action="task.create") == []
