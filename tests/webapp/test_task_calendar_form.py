"""The task form's calendar: the window's ends typed as wall times in the task's own zone (not
UTC, not the browser's), shown back the same way, and an edit saved unchanged keeps the stored
instants to the millisecond; a bad exclusion is shown next to its line."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from html import unescape

from flask import Flask
from flask.testing import FlaskClient

from scheduler_core import TaskDefinition
from tests.webapp.conftest import Auth, csrf_token
from webapp.forms import VERSION_FIELD
from webapp.node import scheduler_of
from webapp.task_form import TaskForm


def _ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp() * 1000)  # type: ignore[misc]


def _post(client: FlaskClient, path: str, fields: dict[str, str]) -> str:
    response = client.post(path, data={**fields, "csrf_token": csrf_token(client, path)})
    return f"{response.status_code} {response.get_data(as_text=True)}"


def _fields(task: TaskDefinition) -> dict[str, str]:
    form = TaskForm.from_task(task)
    return {**form.values, **{name: "1" for name, checked in form.checks.items() if checked}}


def test_the_window_is_typed_and_shown_in_the_tasks_zone(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    scheduler = scheduler_of(app)
    base = TaskDefinition(id="tokyo", name="Tokyo", cron="0 9 * * *", timezone="Asia/Tokyo")
    fields = {**_fields(base), "id": "tokyo", "calendar_from": "2027-01-04T09:00",
              "calendar_until": "2027-04-01T00:00", "calendar_exclude": "2027-02-11\n\n0 9 * * 6,0\n"}
    assert _post(client, "/tasks/new", fields).startswith("303")
    calendar = scheduler.task_ops.get("tokyo").calendar
    assert calendar is not None
    # 09:00 in Tokyo (UTC+9) is 00:00 UTC; blank lines are not exclusions
    assert (calendar.active_from_ms, calendar.active_until_ms) == (_ms(2027, 1, 4, 0, 0), _ms(2027, 3, 31, 15, 0))
    assert calendar.exclude == ("2027-02-11", "0 9 * * 6,0")
    page = client.get("/tasks/edit/tokyo").get_data(as_text=True)
    assert 'name="calendar_from" value="2027-01-04T09:00"' in page


def test_an_unchanged_edit_keeps_the_stored_instants(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    scheduler = scheduler_of(app)
    start = _ms(2027, 1, 4, 8, 30) + 12_345  # not a whole minute: shown with seconds and milliseconds
    stored = scheduler.register(TaskDefinition(id="berlin", name="Berlin", cron="*/5 * * * *",
                                               timezone="Europe/Berlin", calendar={"active_from_ms": start}))
    fields = _fields(stored)
    assert fields["calendar_from"] == "2027-01-04T09:30:12.345" and fields["calendar_until"] == ""
    assert _post(client, "/tasks/edit/berlin", {**fields, VERSION_FIELD: str(stored.updated_at)}).startswith("303")
    after = scheduler.task_ops.get("berlin")
    assert after.calendar == stored.calendar  # to the millisecond


def test_a_bad_exclusion_is_shown_next_to_its_line_and_nothing_is_stored(app: Flask, client: FlaskClient,
                                                                         auth: Auth) -> None:
    auth.login()
    scheduler = scheduler_of(app)
    fields = {**_fields(TaskDefinition(id="bad", name="Bad", cron="0 9 * * *")), "id": "bad",
              "calendar_exclude": "2027-12-25\n\n25.12.2027", "calendar_from": "2027-13-01T00:00"}
    answer = _post(client, "/tasks/new", fields)
    assert answer.startswith("400")
    errors = dict(re.findall(r'<span class="field-error" id="([a-z_]+)-error">(.*?)</span>', answer, re.S))
    assert unescape(errors["calendar_from"]).startswith("Not a date and time")
    fields["calendar_from"] = ""
    answer = _post(client, "/tasks/new", fields)
    errors = dict(re.findall(r'<span class="field-error" id="([a-z_]+)-error">(.*?)</span>', answer, re.S))
    assert unescape(errors["calendar_exclude"]).startswith("Line 3: is neither a date (YYYY-MM-DD) nor a cron")
    assert [task.id for task in scheduler.refresh_tasks()] == []
