"""The pause form takes an end as minutes from now or as an until time: a ``datetime-local`` wall
time read in the viewer's zone (the zone field app.js fills from the browser; UTC when empty),
said back in UTC too. Either is 1 minute to 7 days ahead; giving both is refused, each error
beside the field it is about."""

from __future__ import annotations

import html
import re
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from flask import Flask
from flask.testing import FlaskClient

from scheduler_core import Scheduler, TaskDefinition
from tests.webapp.conftest import Auth, csrf_token
from webapp.node import audit_of, scheduler_of

MINUTE = 60_000
DAY = 24 * 60 * MINUTE
BERLIN = "Europe/Berlin"


@pytest.fixture
def scheduler(app: Flask, auth: Auth) -> Scheduler:
    scheduler = scheduler_of(app)
    scheduler.register(TaskDefinition(id="report", name="Report", cron="0 2 * * *"))
    auth.login()
    return scheduler


def _pause(client: FlaskClient, **form: str) -> Any:
    return client.post("/tasks/pause/report", data={"reason": "deploy", **form,
                                                    "csrf_token": csrf_token(client, "/tasks/")})


def _wall(ms: int, zone: str) -> str:
    """``ms`` as a datetime-local input value in ``zone``."""
    return datetime.fromtimestamp(ms / 1000, ZoneInfo(zone)).strftime("%Y-%m-%dT%H:%M")


def _ahead(scheduler: Scheduler, ms: int) -> int:
    """A whole minute about ``ms`` after the database clock's now."""
    return (scheduler.task_ops.now_ms() + ms) // MINUTE * MINUTE


def _field_error(page: str, name: str) -> str:
    match = re.search(rf'id="pause_{name}-error">([^<]*)<', page)
    return html.unescape(match.group(1)) if match else ""


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, ZoneInfo("UTC")).strftime("%Y-%m-%d %H:%M UTC")


def test_the_form_offers_an_until_time_in_the_viewers_zone(client: FlaskClient, scheduler: Scheduler) -> None:
    page = client.get("/tasks/view/report").get_data(as_text=True)
    assert re.search(r'<input id="pause_until" name="until" type="datetime-local"', page)
    assert re.search(r'<input id="pause_until_tz" name="until_tz" [^>]*data-viewer-tz', page)  # app.js fills it


def test_an_until_time_is_read_in_the_given_zone_and_said_in_utc(app: Flask, client: FlaskClient,
                                                                 scheduler: Scheduler) -> None:
    end = _ahead(scheduler, 2 * DAY)
    response = _pause(client, until=_wall(end, BERLIN), until_tz=BERLIN)
    assert response.status_code == 303
    state = scheduler.task_state("report")
    assert state.state == "paused" and state.paused is not None and state.paused.until == end
    page = html.unescape(client.get("/tasks/view/report").get_data(as_text=True))
    berlin = datetime.fromtimestamp(end / 1000, ZoneInfo(BERLIN)).strftime("%Y-%m-%d %H:%M %Z")
    assert f"Task report paused until {berlin} ({_utc(end)})." in page
    [entry] = audit_of(app).list(action="task.pause")
    assert entry.after["paused_until"] == end


def test_an_until_time_without_a_zone_is_utc(client: FlaskClient, scheduler: Scheduler) -> None:
    end = _ahead(scheduler, 3 * 60 * MINUTE)
    assert _pause(client, until=_wall(end, "UTC")).status_code == 303
    paused = scheduler.task_state("report").paused
    assert paused is not None and paused.until == end


def test_minutes_still_work_and_say_the_end_in_utc(client: FlaskClient, scheduler: Scheduler) -> None:
    assert _pause(client, minutes="90").status_code == 303
    paused = scheduler.task_state("report").paused
    assert paused is not None and paused.until is not None
    assert f"paused for 90 min, until {_utc(paused.until)}." in client.get("/tasks/view/report").get_data(as_text=True)


def test_minutes_and_an_until_time_together_are_refused(client: FlaskClient, scheduler: Scheduler) -> None:
    response = _pause(client, minutes="30", until=_wall(_ahead(scheduler, DAY), "UTC"))
    assert response.status_code == 400
    page = response.get_data(as_text=True)
    assert _field_error(page, "until") == "Give minutes or an until time, not both: clear one of them."
    assert 'id="pause_until" name="until" type="datetime-local"' in page and 'value="30"' in page  # kept as typed
    assert scheduler.task_state("report").state == "ok"


@pytest.mark.parametrize(
    ("offset", "typed", "zone", "field", "message"),
    [
        (-DAY, None, BERLIN, "until", "is in the past; it is now"),
        (-2 * MINUTE, None, "UTC", "until", "is in the past; it is now"),
        (8 * DAY, None, BERLIN, "until", "is more than 7 days ahead, the longest pause; the latest is"),
        (0, "next monday", BERLIN, "until", "Not a date and time; pick one, or type it as 2026-12-07T09:00."),
        (0, "2026-13-40T25:00", "", "until", "Not a date and time"),
        (DAY, None, "Mars/Olympus", "until_tz", "Not an IANA time zone name"),
        (DAY, None, "/etc/localtime", "until_tz", "Not an IANA time zone name"),
    ],
    ids=["past", "a-minute-ago", "too-far", "words", "no-such-day", "unknown-zone", "a-path"],
)
def test_a_refused_until_time_names_its_field(client: FlaskClient, scheduler: Scheduler, offset: int,
                                               typed: str | None, zone: str, field: str, message: str) -> None:
    end = _ahead(scheduler, offset)
    response = _pause(client, until=typed or _wall(end, zone if field == "until" and zone else "UTC"), until_tz=zone)
    assert response.status_code == 400
    page = response.get_data(as_text=True)
    assert message in _field_error(page, field)
    assert re.search(rf'id="pause_{field}" [^>]*aria-invalid="true"', page)
    assert scheduler.task_state("report").state == "ok"


def test_a_refused_until_time_is_said_in_the_typed_zone_and_utc(client: FlaskClient, scheduler: Scheduler) -> None:
    end = _ahead(scheduler, 8 * DAY)
    error = _field_error(_pause(client, until=_wall(end, BERLIN), until_tz=BERLIN).get_data(as_text=True), "until")
    berlin = datetime.fromtimestamp(end / 1000, ZoneInfo(BERLIN)).strftime("%Y-%m-%d %H:%M %Z")
    assert error.startswith(f"{berlin} ({_utc(end)}) is more than 7 days ahead")
