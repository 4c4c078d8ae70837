"""Logs pages: filters, keyset pages walked through their links, masked details, and log
failures with repair per row and repair-all (operator, CSRF, audited)."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select
from werkzeug.security import generate_password_hash

from scheduler_core.db.tables import logs
from tests.helpers.journal import insert_rows, journal_pending, log_row
from tests.webapp.conftest import Auth, csrf_token
from webapp.node import accounts_of, audit_of

DETAIL = re.compile(r'href="/logs/entry/([^"]+)"')
OLDER = re.compile(r'<a [^>]*href="([^"]+)"[^>]*rel="next"')


def _viewer(app: Flask, auth: Auth, role: str = "viewer") -> None:
    accounts_of(app).create(f"{role}1", role, generate_password_hash(f"{role}-pw-1"))
    auth.login(f"{role}1", f"{role}-pw-1")


def _ids(page: str) -> list[str]:
    return DETAIL.findall(page)


def _walk(client: FlaskClient, url: str) -> list[str]:
    """Every log id reached from ``url`` by following "Older" links, as a browser would."""
    seen: list[str] = []
    while True:
        response = client.get(url)
        assert response.status_code == 200, url
        page = response.get_data(as_text=True)
        seen += _ids(page)
        older = OLDER.search(page)
        if older is None:
            return seen
        url = html.unescape(older.group(1))


def _engine(app: Flask) -> Any:
    return app.extensions["hai_engine"]


def _seed_logs(app: Flask) -> list[dict[str, Any]]:
    rows = [log_row(f"log-{i:03d}", 1_700_000_000_000 + (i // 5) * 60_000, ("success", "failed")[i % 2],
                    ("billing", "report")[i % 3 == 0], source=("ops", None)[i % 4 == 0]) for i in range(123)]
    insert_rows(_engine(app), logs, rows)  # five rows share each started_at
    return sorted(rows, key=lambda r: (r["started_at"], r["id"]), reverse=True)


def test_keyset_pages_walk_every_log_once(app: Flask, client: FlaskClient, auth: Auth) -> None:
    newest_first = _seed_logs(app)
    _viewer(app, auth)
    assert _walk(client, "/logs/") == [r["id"] for r in newest_first]
    failed = [r["id"] for r in newest_first if r["status"] == "failed" and r["task_id"] == "billing"]
    assert _walk(client, "/logs/?status=failed&task=billing") == failed  # the links carry the filters
    assert _walk(client, "/logs/?source=ops") == [r["id"] for r in newest_first if r["source"] == "ops"]
    second = client.get(html.unescape(OLDER.search(client.get("/logs/").get_data(as_text=True)).group(1)))
    text = second.get_data(as_text=True)
    assert "Newer" in text and "Newest" in text and "offset" not in text
    # The newest page follows new attempts with its own filters; a deeper page stays put.
    newest = client.get("/logs/?status=failed&task=billing").get_data(as_text=True)
    assert 'class="live-poll" hx-get="/logs/?' in newest and "every 5s" in newest
    assert "task=billing" in newest.split('class="live-poll"', 1)[1].split(">", 1)[0]
    assert "live-poll" not in text


def test_fragment_and_time_window(app: Flask, client: FlaskClient, auth: Auth) -> None:
    newest_first = _seed_logs(app)
    _viewer(app, auth)
    fragment = client.get("/logs/?status=success", headers={"HX-Request": "true"})
    body = fragment.get_data(as_text=True)
    assert fragment.status_code == 200 and "<html" not in body and 'hx-target="#rows"' in body
    assert "HX-Request" in fragment.headers["Vary"]
    start = 1_700_000_000_000 + 2 * 60_000  # rows 10..19 of the seed
    end = start + 2 * 60_000
    expected = [r["id"] for r in newest_first if start <= r["started_at"] < end]

    def local(ms: int, zone: str) -> str:
        from zoneinfo import ZoneInfo
        return datetime.fromtimestamp(ms / 1000, ZoneInfo(zone)).strftime("%Y-%m-%dT%H:%M:%S")

    # datetime-local values read in the viewer's zone, ISO with an offset, and plain ms
    for query in (f"since={local(start, 'Asia/Tokyo')}&until={local(end, 'Asia/Tokyo')}&tz=Asia/Tokyo",
                  f"since={local(start, 'UTC')}&until={local(end, 'UTC')}",
                  "since=" + datetime.fromtimestamp(start / 1000, UTC).isoformat().replace("+", "%2B")
                  + f"&until={end}"):
        assert _ids(client.get(f"/logs/?{query}").get_data(as_text=True)) == expected, query


def test_bad_filters_name_their_field(app: Flask, client: FlaskClient, auth: Auth) -> None:
    _seed_logs(app)
    _viewer(app, auth)
    for query, message in (("since=yesterday", "Use a date and time"), ("status=running", "Choose one of"),
                           ("tz=Mars/Olympus&since=2025-01-01T00:00", "Unknown time zone"),
                           ("since=2025-01-02T00:00&until=2025-01-01T00:00", "Must be later than the start"),
                           ("task=" + "x" * 129, "At most 128 characters"),
                           ("before=not-a-cursor", "before: must be a page cursor")):
        response = client.get(f"/logs/?{query}")
        text = response.get_data(as_text=True)
        assert response.status_code == 400 and message in text and "log-000" not in text, query
        assert 'class="field-error"' in text or "flash-error" in text
    fragment = client.get("/logs/?since=yesterday", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert "Use a date and time" in fragment and 'role="alert"' in fragment


def test_detail_masks_secrets(app: Flask, client: FlaskClient, auth: Auth) -> None:
    row = {**log_row("log-secret", 1_700_000_000_000, "failed", "billing"),
           "error": "POST https://bob:hunter2@api.example.com/pay failed; api_key=sk_live_123 Authorization: "
                    "Bearer tok-456", "result": {"password": "pw-789", "orders": 3, "url": "https://u:pw-000@h/x"}}
    insert_rows(_engine(app), logs, [row])
    _viewer(app, auth)
    listing = client.get("/logs/").get_data(as_text=True)
    page = client.get("/logs/entry/log-secret").get_data(as_text=True)
    for secret in ("hunter2", "sk_live_123", "tok-456", "pw-789", "pw-000"):
        assert secret not in page and secret not in listing, secret
    assert "***" in page and "api.example.com" in page and "&#34;orders&#34;: 3" in page
    assert client.get("/logs/entry/no-such-log").status_code == 404


def _repair(client: FlaskClient, occurrence: str, token: str | None = "page") -> Any:
    data = {"csrf_token": csrf_token(client, "/logs/failures")} if token else {}
    return client.post(f"/logs/failures/{occurrence}/repair", data=data)


def test_failures_page_and_repair_per_row(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = app.extensions["hai_scheduler"]
    pending = journal_pending(_engine(app), 3)
    _viewer(app, auth, "operator")
    page = client.get("/logs/failures").get_data(as_text=True)
    assert all(o in page for o in pending) and "Repair all" in page and "<strong>3</strong>" in page
    fragment = client.get("/logs/failures", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert "<html" not in fragment and all(o in fragment for o in pending)
    # A boosted form lands here after its redirect: htmx swaps the whole page into the body.
    boosted = client.get("/logs/failures", headers={"HX-Request": "true", "HX-Boosted": "true"})
    assert "<html" in boosted.get_data(as_text=True) and 'id="flashes"' in boosted.get_data(as_text=True)
    done = _repair(client, pending[0])
    assert done.status_code == 303 and done.headers["Location"].endswith("/logs/failures")
    assert scheduler.execution.get(pending[0]).log_persistence == "persisted"
    after = client.get("/logs/failures").get_data(as_text=True)
    assert "was written from the journal" in after and pending[0] not in after.split("</main>")[0].split(
        "<table>")[1]
    [entry] = audit_of(app).list(action="log.repair")
    assert (entry.actor, entry.target, entry.before, entry.after) == (
        "operator1", pending[0], {"log_persistence": "pending"}, {"log_persistence": "persisted"})
    again = _repair(client, pending[0])  # someone else was faster: nothing to do, nothing audited
    assert again.status_code == 303 and "Nothing was changed" in client.get("/logs/failures").get_data(as_text=True)
    missing = _repair(client, "no-such-occurrence")
    assert missing.status_code == 303 and "There is no execution" in client.get("/logs/failures").get_data(
        as_text=True)
    assert len(audit_of(app).list(action="log.repair")) == 1
    with _engine(app).connect() as conn:
        assert conn.execute(select(func.count()).select_from(logs)).scalar_one() == 1
        conn.rollback()


def test_repair_all_drains_and_reports(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = app.extensions["hai_scheduler"]
    journal_pending(_engine(app), 130)  # more than one round
    _viewer(app, auth, "operator")
    response = client.post("/logs/failures/repair-all", data={"csrf_token": csrf_token(client, "/logs/failures")})
    assert response.status_code == 303
    page = client.get("/logs/failures").get_data(as_text=True)
    assert "Repaired 130 log(s); 0 remain." in page and "Every log is written." in page
    assert scheduler.execution.log_failure_count().value == 0
    [entry] = audit_of(app).list(action="log.repair_all")
    assert entry.actor == "operator1" and entry.before == {"pending": "130"}
    assert entry.after == {"repaired": 130, "failed": 0, "remaining": "0", "rounds": 2}


def test_viewer_and_missing_csrf_change_nothing(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = app.extensions["hai_scheduler"]
    [pending] = journal_pending(_engine(app), 1)
    _viewer(app, auth)
    page = client.get("/logs/failures").get_data(as_text=True)
    assert pending in page and "Repair all" not in page and ">Repair<" not in page
    assert _repair(client, pending).status_code == 403
    token = csrf_token(client, "/logs/failures")
    assert client.post("/logs/failures/repair-all", data={"csrf_token": token}).status_code == 403
    auth.logout()
    _viewer(app, auth, "operator")
    assert _repair(client, pending, token=None).status_code == 400
    assert client.post("/logs/failures/repair-all").status_code == 400
    assert scheduler.execution.get(pending).log_persistence == "pending"
    assert audit_of(app).list(action="log.repair") == [] and audit_of(app).list(action="log.repair_all") == []
