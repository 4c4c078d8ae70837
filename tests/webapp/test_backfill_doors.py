"""Backfill through its three doors, on every database: the dashboard's form (preview, live
preview fragment, queue, errors next to their fields), the JSON API operation and the command
line (``hai-scheduler tasks backfill``). Each queues the same fire minutes the core computes
(tests/integration/test_backfill.py holds the rules), and each refusal names its field and
changes nothing."""

from __future__ import annotations

import html
import re
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from scheduler_core import TaskDefinition
from scheduler_core.db.tables import audit_log
from tests.conftest import TestDatabase
from tests.helpers.node_cluster import journal
from tests.webapp.api_support import make_api
from tests.webapp.conftest import Auth, csrf_token
from webapp.cli import main
from webapp.node import scheduler_of

BERLIN = ZoneInfo("Europe/Berlin")


@pytest.fixture
def hourly(db_app: Flask) -> dict[str, Any]:
    """An hourly task in Berlin, and yesterday's 00:00-05:30 there: six fire times."""
    scheduler = scheduler_of(db_app)
    scheduler.register(TaskDefinition(id="hourly", name="Hourly", cron="0 * * * *", timezone="Europe/Berlin"))
    day = (datetime.fromtimestamp(scheduler.task_ops.now_ms() / 1000, BERLIN) - timedelta(days=1)).date()
    minutes = [int(datetime(day.year, day.month, day.day, h, tzinfo=BERLIN).timestamp() * 1000) for h in range(6)]
    return {"day": day.isoformat(), "minutes": minutes}


def _rows(db_app: Flask) -> dict[int, tuple[str, str, str | None]]:
    engine = scheduler_of(db_app).engine
    return {int(r.scheduled_minute): (r.status, r.trigger, r.source) for r in journal(engine, task_id="hourly")}


def _audits(db_app: Flask) -> list[Any]:
    with scheduler_of(db_app).engine.connect() as conn:
        found = list(conn.execute(select(audit_log).where(audit_log.c.action == "task.backfill")))
        conn.rollback()
    return found


def _text(response: Any) -> str:
    """The page's text, without tags (an href kept as ``href=...``), its spaces made one."""
    body = re.sub(r'<a [^>]*(href="[^"]*")[^>]*>', r" \1 ", response.get_data(as_text=True))
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body)))


@pytest.fixture
def operator(db_app: Flask) -> FlaskClient:
    client = db_app.test_client()
    assert Auth(client).login().status_code == 302
    return client


def _post(client: FlaskClient, **form: str) -> Any:
    token = csrf_token(client, "/tasks/backfill/hourly")
    return client.post("/tasks/backfill/hourly", data={"csrf_token": token, "tz": "", "reason": "", **form})


def test_the_form_previews_then_queues(db_app: Flask, operator: FlaskClient, hourly: dict[str, Any]) -> None:
    day, minutes = hourly["day"], hourly["minutes"]
    page = _text(operator.get("/tasks/view/hourly"))
    assert 'href="/tasks/backfill/hourly"' in page
    assert "Europe/Berlin" in _text(operator.get("/tasks/backfill/hourly"))

    shown = _text(_post(operator, start=f"{day}T00:00", end=f"{day}T05:30", action="preview"))
    assert f"6 fire times , from {day} 00:00 CET to {day} 05:00 CET" in shown
    assert "Would run 6" in shown and _rows(db_app) == {}  # a preview changes nothing

    fragment = operator.post("/tasks/backfill/hourly", headers={"HX-Request": "true"}, data={
        "csrf_token": csrf_token(operator, "/tasks/backfill/hourly"), "start": f"{day}T03:00",
        "end": f"{day}T05:30", "tz": "", "reason": "", "action": "preview"})
    assert fragment.status_code == 200 and "<html" not in fragment.get_data(as_text=True)
    assert "3 fire times" in _text(fragment)

    done = _post(operator, start=f"{day}T00:00", end=f"{day}T05:30", reason="the outage", action="queue")
    assert done.status_code == 303 and done.headers["Location"].endswith("/tasks/view/hourly")
    assert "6 past runs queued (6 new, 0 missed or skipped before)" in _text(operator.get("/tasks/view/hourly"))
    assert _rows(db_app) == {m: ("queued", "backfill", "admin") for m in minutes}
    (audit,) = _audits(db_app)
    assert (audit.actor, audit.target, audit.reason) == ("admin", "hourly", "the outage")

    again = _post(operator, start=f"{day}T00:00", end=f"{day}T05:30", action="queue")
    assert again.status_code == 303
    assert "nothing queued; the range's 6 fire times ran or wait already" in _text(operator.get("/tasks/view/hourly"))
    # UTC typed beside the times: 00:00-01:59 UTC is 01:00-02:59 in Berlin
    shown = _text(_post(operator, start=f"{day}T00:00", end=f"{day}T01:59", tz="UTC", action="preview"))
    assert f"2 fire times , from {day} 01:00 CET to {day} 02:00 CET" in shown
    assert "Ran or wait already: left as they are 2" in shown


@pytest.mark.parametrize(("form", "field", "words"), [
    ({"start": "", "end": "{day}T05:00"}, "start", "Pick a date and time."),
    ({"start": "{day}T05:00", "end": "yesterday"}, "end", "Not a date and time"),
    ({"start": "{day}T05:00", "end": "{day}T01:00"}, "end", "the range is reversed"),
    ({"start": "{day}T05:00", "end": "2999-01-01T00:00"}, "end", "is not in the past"),
    ({"start": "{day}T05:00", "end": "{day}T06:00", "tz": "Europe/Berln"}, "tz", "Not an IANA time zone"),
    ({"start": "{day}T05:00", "end": "{day}T06:00", "reason": "x" * 501}, "reason", "at most 500 characters"),
    ({"start": "{day}T05:00", "end": "{day}T06:00", "action": "run"}, "start", "Press Preview or Queue"),
])
def test_the_form_refuses_naming_the_field(db_app: Flask, operator: FlaskClient, hourly: dict[str, Any],
                                           form: dict[str, str], field: str, words: str) -> None:
    sent = {"action": "queue", **{k: v.format(day=hourly["day"]) for k, v in form.items()}}
    response = _post(operator, **sent)
    assert response.status_code == 400
    body = response.get_data(as_text=True)
    error = re.search(rf'id="backfill_{field}-error">([^<]*)<', body)
    assert error and words in html.unescape(error.group(1)), body[-3000:]
    assert f'id="backfill_{field}"' in body and _rows(db_app) == {} and _audits(db_app) == []


def test_the_api_operation(db_app: Flask, hourly: dict[str, Any]) -> None:
    api = make_api(db_app)
    minutes = hourly["minutes"]
    body = {"start_ms": minutes[0], "end_ms": minutes[-1] + 30 * 60_000, "dry_run": True}
    dry = api.call("POST", "/api/v1/tasks/backfill/hourly", "operator", body)
    assert dry.status_code == 200, dry.get_json()
    assert dry.get_json() == {"task_id": "hourly", "count": 6, "first_ms": minutes[0], "last_ms": minutes[-1],
                              "new": 6, "again": 0, "already": 0, "queued": 0, "dry_run": True}
    assert _rows(db_app) == {}
    done = api.call("POST", "/api/v1/tasks/backfill/hourly", "operator", {**body, "dry_run": False, "reason": "x"})
    assert done.get_json()["queued"] == 6
    assert _rows(db_app) == {m: ("queued", "backfill", "operator1") for m in minutes}
    assert [(a.actor, a.reason) for a in _audits(db_app)] == [("operator1", "x")]
    for sent, field in (({**body, "end_ms": minutes[0] - 1}, "end_ms"), ({**body, "start_ms": "today"}, "start_ms"),
                        ({**body, "end_ms": 2**60}, "end_ms"), ({**body, "overlap": "skip"}, "overlap"),
                        ({**body, "reason": "x" * 501}, "reason")):
        refused = api.call("POST", "/api/v1/tasks/backfill/hourly", "operator", sent)
        assert refused.status_code == 422, (sent, refused.get_json())
        assert field in str(refused.get_json()), refused.get_json()
    assert api.call("POST", "/api/v1/tasks/backfill/nope", "operator", body).status_code == 404
    assert api.call("POST", "/api/v1/tasks/backfill/hourly", "viewer", body).status_code == 403
    assert len(_rows(db_app)) == 6 and len(_audits(db_app)) == 1


def test_the_command(db_app: Flask, database: TestDatabase, hourly: dict[str, Any],
                     capsys: pytest.CaptureFixture[str]) -> None:
    day, minutes = hourly["day"], hourly["minutes"]

    def cli(*words: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["tasks", "backfill", "hourly", *words, "--database-url", database.url])
        out, err = capsys.readouterr()
        return code, out.strip(), err.strip()

    code, out, _ = cli("--from", f"{day}T00:00", "--to", f"{day}T05:30", "--dry-run")
    assert code == 0 and out.startswith(f"hourly: 6 fire times, {day} 00:00 CET (")
    assert out.endswith("would queue 6 (6 new, 0 missed or skipped before); 0 ran or wait already, left as they "
                        "are (dry run: nothing queued)") and _rows(db_app) == {}
    first_utc = datetime.fromtimestamp(minutes[3] / 1000, ZoneInfo("UTC")).strftime("%Y-%m-%dT%H:%MZ")
    code, out, _ = cli("--from", first_utc, "--to", str(minutes[-1]), "--reason", "from the cli")
    assert code == 0 and "queued 3 (3 new" in out, out
    assert _rows(db_app) == {m: ("queued", "backfill", "cli") for m in minutes[3:]}
    code, out, _ = cli("--from", f"{day}T00:00", "--to", f"{day}T05:30")
    assert code == 0 and "queued 3 (3 new, 0 missed or skipped before); 3 ran or wait already" in out
    assert [a.reason for a in _audits(db_app)] == ["from the cli", None]
    for words, flag in ((("--from", "yesterday", "--to", f"{day}T05:00"), "--from"),
                        (("--from", f"{day}T05:00", "--to", f"{day}T01:00"), "--to"),
                        (("--from", f"{day}T05:00", "--to", "2999-01-01T00:00"), "--to"),
                        (("--from", f"{day}T05:00", "--to", f"{day}T06:00", "--tz", "Mars/Base"), "--tz"),
                        (("--from", "99999999999999999999", "--to", f"{day}T06:00"), "--from"),
                        (("--from", f"{day}T05:00", "--to", f"{day}T06:00", "--reason", "x" * 501), "--reason")):
        code, _, err = cli(*words)
        assert code == 1 and err.startswith(f"error: hai:scheduler:012 {flag}: "), (words, err)
    assert len(_rows(db_app)) == 6 and len(_audits(db_app)) == 2
    capsys.readouterr()
    assert main(["tasks", "backfill", "nope", "--from", "0", "--to", "1", "--database-url", database.url]) == 1
    assert capsys.readouterr().err.startswith("error: hai:scheduler:020")
