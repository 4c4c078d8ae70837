"""Every declared task field goes in and comes out the same through every door, on every database.

The test walks ``TaskDefinition``'s declarations (``scheduler_core.task_schema``): for each field a
user declares it sets the field's example value through Python (``register`` / ``update_task``), the
task form (the page as rendered, parsed and posted back as a browser would), the JSON API, and a
task file (``read_task_file`` + ``plan`` / ``apply_step``), and reads it back through each. A field
added to the dataclass without a widget the form renders, a type the API derives, a column the store
maps or a key the task file takes fails here, naming the field and the door.
"""

from __future__ import annotations

import json
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from flask import Flask
from flask.testing import FlaskClient

from scheduler_core.executors import ExecutorRegistry
from scheduler_core.model import DECLARED, UPDATABLE_FIELDS, TaskDefinition, declared_json, validate_task
from scheduler_core.runtime.task_apply import apply_step, plan
from scheduler_core.runtime.task_files import export_tasks, read_task_file
from scheduler_core.task_schema import Widget
from tests.webapp.api_support import Api, make_api
from tests.webapp.conftest import Auth, csrf_token
from webapp.node import accounts_of, scheduler_of

BASE = TaskDefinition(id="base", name="Base task", cron="0 3 * * *",
                      handler={"kind": "api", "url": "http://127.0.0.1:9/base", "method": "POST", "headers": {}})
REGISTRY = ExecutorRegistry()  # what registering normalises a handler to (defaults filled in)
EXAMPLES = {f.name: f.spec.example for f in DECLARED if f.spec.widget is not Widget.ID}


def _with(task_id: str, name: str) -> TaskDefinition:
    """BASE under ``task_id`` with field ``name`` set to its declared example."""
    wanted = TaskDefinition(**{**declared_json(BASE), "id": task_id, name: EXAMPLES[name]})
    return validate_task(wanted, REGISTRY.validate)


def _expected(task_id: str, name: str) -> dict[str, Any]:
    return {**declared_json(_with(task_id, name)), "id": task_id}


class _FormReader(HTMLParser):
    """What a browser would post for the first ``<form class="... task-form">`` on a page."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}
        self.names: set[str] = set()
        self._inside = False
        self._textarea: str | None = None
        self._select: str | None = None
        self._first_option: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {key: value or "" for key, value in attrs}
        if tag == "form" and "task-form" in attr.get("class", ""):
            self._inside = True
        if not self._inside:
            return
        name = attr.get("name")
        if tag == "input" and name:
            self.names.add(name)
            if attr.get("type") == "checkbox":
                if "checked" in attr:
                    self.fields[name] = attr.get("value", "on")
            else:
                self.fields[name] = attr.get("value", "")
        elif tag == "textarea" and name:
            self.names.add(name)
            self._textarea = name
            self.fields[name] = ""
        elif tag == "select" and name:
            self.names.add(name)
            self._select = name
        elif tag == "option" and self._select:
            self._first_option.setdefault(self._select, attr.get("value", ""))
            if "selected" in attr:
                self.fields[self._select] = attr.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._inside = False
        elif tag == "textarea":
            self._textarea = None
        elif tag == "select" and self._select:
            self.fields.setdefault(self._select, self._first_option.get(self._select, ""))
            self._select = None

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.fields[self._textarea] += data.removeprefix("\n") if not self.fields[self._textarea] else data


def _form_of(client: FlaskClient, path: str) -> _FormReader:
    response = client.get(path)
    assert response.status_code == 200, (path, response.status_code)
    reader = _FormReader()
    reader.feed(response.get_data(as_text=True))
    return reader


def _post(client: FlaskClient, path: str, fields: dict[str, str]) -> Any:
    return client.post(path, data={**fields, "csrf_token": csrf_token(client, path)})


def _form_fields(task: TaskDefinition) -> dict[str, str]:
    """The form a person fills for ``task``: created from the blank page's fields."""
    from webapp.task_form import TaskForm  # the form's own reading of a definition: what its inputs hold

    shown = TaskForm.from_task(task)
    fields = dict(shown.values)
    fields.update({name: "1" for name, checked in shown.checks.items() if checked})
    return fields


@pytest.fixture
def api(db_app: Flask) -> Api:
    return make_api(db_app)


def test_every_declared_field_has_an_example_and_a_widget() -> None:
    for declared in DECLARED:
        if declared.spec.widget is not Widget.ID:
            assert declared.spec.example is not None, f"{declared.name}: declare an example for the door test"
            assert declared.spec.example != declared.default, f"{declared.name}: the example must not be the default"
    assert set(UPDATABLE_FIELDS) == {f.name for f in DECLARED} - {"id"}


def test_each_field_round_trips_through_every_door(api: Api, db_app: Flask, tmp_path: Path) -> None:
    scheduler = scheduler_of(db_app)
    accounts_of(db_app).create_team(EXAMPLES["team"])  # a task can only be put in a team that exists
    browser = db_app.test_client()
    Auth(browser).login()
    blank = _form_of(browser, "/tasks/new")
    for name in EXAMPLES:
        wanted_form = _form_fields(_with("x", name))
        missing = {field for field in wanted_form if field not in blank.names and field != "id"}
        assert not missing, f"{name}: the form renders no input for {sorted(missing)}"

    entries = []
    for name in EXAMPLES:
        # Python in, every door out.
        stored = scheduler.register(_with(f"py-{name}", name))
        assert declared_json(stored) == _expected(f"py-{name}", name), f"{name}: python create"

        # The form: create from a filled form, then open the edit page and save it unchanged.
        form_id = f"form-{name}"
        response = _post(browser, "/tasks/new", {**_form_fields(_with(form_id, name)), "id": form_id})
        assert response.status_code == 303, (name, response.get_data(as_text=True)[:2000])
        assert declared_json(scheduler.task_ops.get(form_id)) == _expected(form_id, name), f"{name}: form create"
        shown = _form_of(browser, f"/tasks/edit/{form_id}")
        response = _post(browser, f"/tasks/edit/{form_id}", shown.fields)
        assert response.status_code == 303, (name, response.get_data(as_text=True)[:2000])
        assert declared_json(scheduler.task_ops.get(form_id)) == _expected(form_id, name), f"{name}: form edit"

        # The API: create with the field set; read it back.
        api_id = f"api-{name}"
        body = {key: value for key, value in _expected(api_id, name).items() if value is not None}
        response = api.call("POST", "/api/v1/tasks", body=body)
        assert response.status_code == 201, (name, response.get_json())
        read = api.call("GET", f"/api/v1/tasks/{api_id}", role="viewer").get_json()
        assert {key: read[key] for key in _expected(api_id, name)} == _expected(api_id, name), f"{name}: api"

        # Updates: each door changes the field from BASE's value to the example.
        for door in ("python", "form", "api"):
            task_id = f"upd-{door}-{name}"
            base = scheduler.register(replace(BASE, id=task_id))
            if door == "python":
                scheduler.update_task(task_id, expected_updated_at=base.updated_at,
                                      **{name: getattr(_with(task_id, name), name)})
            elif door == "form":
                shown = _form_of(browser, f"/tasks/edit/{task_id}")
                wanted = _form_fields(_with(task_id, name))
                changed = {field: value for field, value in wanted.items() if shown.fields.get(field) != value}
                fields = {**shown.fields, **changed}
                for check in (f.name for f in DECLARED if f.spec.widget is Widget.CHECK):
                    if check not in wanted:
                        fields.pop(check, None)
                response = _post(browser, f"/tasks/edit/{task_id}", fields)
                assert response.status_code == 303, (name, response.get_data(as_text=True)[:2000])
            else:
                response = api.call("PATCH", f"/api/v1/tasks/{task_id}", body={
                    "expected_updated_at": base.updated_at, name: _expected(task_id, name)[name]})
                assert response.status_code == 200, (name, response.get_json())
            got = declared_json(scheduler.task_ops.get(task_id))
            assert got == _expected(task_id, name), f"{name}: {door} update"
        entries.append(_expected(f"file-{name}", name))

    # Task files (one per team: a file applies to one team, its top-level team:): applied, then
    # exported; both hold every example.
    by_team: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        by_team.setdefault(entry["team"], []).append(entry)
    for team, listed in by_team.items():
        path = tmp_path / f"tasks-{team}.yaml"
        path.write_text(yaml.safe_dump({"team": team, "tasks": listed}, sort_keys=False))
        task_file = read_task_file(str(path), {})
        for step in plan(scheduler, task_file, f"doors-{team}", prune=False).changes:
            apply_step(scheduler, step, f"doors-{team}")
    for entry in entries:
        name = entry["id"].removeprefix("file-")
        assert declared_json(scheduler.task_ops.get(entry["id"])) == entry, f"{name}: task file"
    by_id = {}
    for team in by_team:
        document = json.loads(export_tasks(scheduler.refresh_tasks(), as_json=True, team=team).text)
        by_id.update({entry["id"]: {**entry, "team": document.get("team", "default")} for entry in document["tasks"]})
    for entry in entries:
        name = entry["id"].removeprefix("file-")
        assert by_id[entry["id"]][name] == entry[name], f"{name}: task file export"
