"""A refused task value gets the same error, naming the same field, through every door.

For each declared field the test sends the field's declared ``invalid`` value (of the right
type, refused by the field's rule) through Python (``register``), the task form (posted as a
browser would), the JSON API and a task file, and compares what each door says: the field it
names and the message. A door that checks a field by a rule of its own (a different bound, a
different text) fails here, naming the field and the door. Checkboxes have no such value.
"""

from __future__ import annotations

import re
from datetime import datetime
from html import unescape
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml
from flask import Flask

from scheduler_core.errors import ConfigError, InvalidCronError
from scheduler_core.model import DECLARED, TaskDefinition, declared_json
from scheduler_core.runtime.task_files import read_task_file
from scheduler_core.task_schema import Widget
from tests.webapp.api_support import Api, make_api
from tests.webapp.conftest import Auth, csrf_token
from tests.webapp.test_task_schema_doors import BASE
from webapp.node import scheduler_of
from webapp.task_form import TaskForm, error_text, form_field

INVALID = {f.name: f.spec.invalid for f in DECLARED if f.spec.widget is not Widget.CHECK}


def _bad(task_id: str, name: str) -> dict[str, Any]:
    entry = {**declared_json(BASE), "id": task_id, name: INVALID[name]}
    return {key: value for key, value in entry.items() if value is not None}


def _said(exc: ConfigError | InvalidCronError) -> tuple[str, str]:
    """The field an error names and its message without the field's prefix."""
    field = "cron" if isinstance(exc, InvalidCronError) else exc.field
    return field, exc.message.removeprefix(f"{field}: ")


@pytest.fixture
def api(db_app: Flask) -> Api:
    return make_api(db_app)


def test_every_field_but_a_checkbox_declares_a_refused_value() -> None:
    for declared in DECLARED:
        if declared.spec.widget is not Widget.CHECK:
            assert declared.spec.invalid is not None, f"{declared.name}: declare an invalid value for the error test"


def test_each_refused_value_gets_the_same_error_through_every_door(api: Api, db_app: Flask, tmp_path: Path) -> None:
    scheduler = scheduler_of(db_app)
    browser = db_app.test_client()
    Auth(browser).login()
    before = {task.id for task in scheduler.refresh_tasks()}
    for name in INVALID:
        entry = _bad(f"bad-{name}"[:100], name)
        with pytest.raises((ConfigError, InvalidCronError)) as caught:
            scheduler.register(TaskDefinition(**entry))
        field, message = _said(caught.value)
        assert field.split(".")[0] == name, f"{name}: python names {field}"

        response = api.call("POST", "/api/v1/tasks", body=entry)
        problem = response.get_json()
        assert response.status_code == 422, (name, problem)
        assert (problem["field"], problem["detail"].removeprefix(f"{problem['field']}: ")) == (field, message), \
            f"{name}: the API says otherwise"

        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"tasks": [entry]}, sort_keys=False))
        with pytest.raises((ConfigError, InvalidCronError)) as caught:
            read_task_file(str(path), {})
        said = caught.value.message
        assert said.endswith(f"{field}: {message}") or said.endswith(message), f"{name}: the task file says {said!r}"

        fields = _typed(entry, name)
        response = browser.post("/tasks/new", data={**fields, "csrf_token": csrf_token(browser, "/tasks/new")})
        assert response.status_code == 400, (name, response.status_code)
        shown = error_text(ConfigError(field, message) if field != "cron" else InvalidCronError(f"cron: {message}"))
        assert _form_error(response.get_data(as_text=True), form_field(field)) == shown, f"{name}: the form"
    assert {task.id for task in scheduler.refresh_tasks()} == before, "a refused value changed nothing"


def _typed(entry: dict[str, Any], name: str) -> dict[str, str]:
    """What a person types into the form for ``entry`` (a policy's parts typed into its own inputs)."""
    value, widget = entry[name], next(f.spec.widget for f in DECLARED if f.name == name)
    form = TaskForm.from_task(TaskDefinition(**{**entry, name: None if widget in _POLICIES else value}))
    fields = {**form.values, **{check: "1" for check, checked in form.checks.items() if checked}}
    if widget is Widget.RETRY:
        fields.update(retry_max_attempts=str(value["max_attempts"]),
                      retry_backoff=", ".join(str(ms) for ms in value["backoff_ms"]))
    elif widget is Widget.CATCHUP:
        fields.update(catchup_policy=str(value["policy"]), catchup_window_ms=str(value["window_ms"]))
    elif widget is Widget.OVERLAP:
        fields.update(overlap_policy=str(value["policy"]), overlap_buffer_limit=str(value["buffer_limit"]))
    elif widget is Widget.CALENDAR:  # the window's ends typed as wall times in the task's zone
        zone = ZoneInfo(entry.get("timezone") or "UTC")
        fields.update({key: "" if value[part] is None else
                       datetime.fromtimestamp(value[part] / 1000, zone).strftime("%Y-%m-%dT%H:%M")
                       for key, part in (("calendar_from", "active_from_ms"), ("calendar_until", "active_until_ms"))},
                      calendar_exclude="\n".join(value["exclude"]))
    return fields


_POLICIES = (Widget.RETRY, Widget.CATCHUP, Widget.OVERLAP, Widget.CALENDAR)


def _form_error(page: str, form_name: str) -> str:
    found = re.search(rf'<span class="field-error" id="{re.escape(form_name)}-error">(.*?)</span>', page, re.S)
    assert found, f"no error span for {form_name}"
    return unescape(found.group(1))


TEXTS = [f.name for f in DECLARED if f.spec.widget in (Widget.LINE, Widget.TEXT)]


def test_surrounding_whitespace_is_stored_alike_through_every_door(api: Api, db_app: Flask, tmp_path: Path) -> None:
    """The form's inputs give text without its surrounding whitespace; so do the other doors (the
    same value stored, whichever door it came through)."""
    scheduler = scheduler_of(db_app)
    browser = db_app.test_client()
    Auth(browser).login()
    for name in TEXTS:
        example = next(f.spec.example for f in DECLARED if f.name == name)
        padded = f"  {example}  "
        stored = {}
        entry = {**_bad(f"pad-py-{name}", name), name: padded}
        stored["python"] = getattr(scheduler.register(TaskDefinition(**entry)), name)
        entry = {**_bad(f"pad-api-{name}", name), name: padded}
        response = api.call("POST", "/api/v1/tasks", body=entry)
        assert response.status_code == 201, (name, response.get_json())
        stored["api"] = getattr(scheduler.task_ops.get(entry["id"]), name)
        entry = {**_bad(f"pad-file-{name}", name), name: padded}
        path = tmp_path / f"pad-{name}.yaml"
        path.write_text(yaml.safe_dump({"tasks": [entry]}, sort_keys=False))
        (task,) = read_task_file(str(path), {}).tasks
        stored["file"] = getattr(task, name)
        entry = {**_bad(f"pad-form-{name}", name), name: padded}
        fields = _typed(entry, name)
        response = browser.post("/tasks/new", data={**fields, "csrf_token": csrf_token(browser, "/tasks/new")})
        assert response.status_code == 303, (name, response.status_code)
        stored["form"] = getattr(scheduler.task_ops.get(entry["id"]), name)
        assert stored == dict.fromkeys(stored, example), name
