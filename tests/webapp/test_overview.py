"""The overview: bounded counts, each a link to its page, live counters, and the hourly chart."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from scheduler_core.db.tables import executions, reach_queue
from scheduler_core.store.journal_queries import HOUR_MS
from scheduler_core.testing import set_clock_offset
from tests.helpers.journal import db_now, execution_row, insert_rows, journal_pending
from tests.webapp.conftest import Auth
from webapp.node import accounts_of

# the two parts of a card: its link and its figure
CARD = re.compile(r'<a class="card card-link[^"]*" href="([^"]+)">\s*<h2>(.*?)</h2>\s*<p class="figure">([^<]*)</p>',
                  re.S)


def _login_viewer(app: Flask, auth: Auth) -> None:
    accounts_of(app).create("viewer1", "viewer", generate_password_hash("viewer-pw-1"))
    auth.login("viewer1", "viewer-pw-1")


def _cards(page: str) -> dict[str, tuple[str, str]]:
    """Card label (tags stripped) -> (link, figure)."""
    return {re.sub(r"<[^>]+>", "", label).strip(): (href, figure) for href, label, figure in CARD.findall(page)}


def _queue_row(status: str) -> dict[str, Any]:
    return {"queue_id": str(uuid.uuid4()), "provider": "mail", "template": None, "recipient": "a@example.com",
            "subject": "s", "body": "b", "extra": None, "status": status, "attempt_count": 1, "max_attempts": 1,
            "retry_delay_ms": 1000, "max_retry_delay_ms": 1000, "next_attempt_at": 1, "created_at": 1,
            "updated_at": 1}


def test_counts_and_links(app: Flask, client: FlaskClient, auth: Auth) -> None:
    engine = app.extensions["hai_engine"]
    scheduler = app.extensions["hai_scheduler"]
    now = db_now(engine)  # the status cards count the last 24 h
    insert_rows(engine, executions, [execution_row(f"u-{i}", 1_000 + i, "unknown") for i in range(2)]
                + [execution_row(f"s-{i}", now - 1_000 + i, "success") for i in range(4)])
    journal_pending(engine, 3)  # failed, with pending logs
    insert_rows(engine, reach_queue, [_queue_row("dead"), _queue_row("dead"), _queue_row("unknown")])
    scheduler.start()  # a heartbeat makes this node alive
    try:
        deadline = time.monotonic() + 20
        while not scheduler.nodes() and time.monotonic() < deadline:
            time.sleep(0.05)
        _login_viewer(app, auth)
        response = client.get("/")
    finally:
        scheduler.stop()
    assert response.status_code == 200
    page = response.get_data(as_text=True)
    cards = _cards(page)
    assert cards["Unknown executions"] == ("/executions/unknown", "2")
    assert cards["Pending log writes"] == ("/logs/failures", "3")
    assert cards["Dead letters"] == ("/notifications/dead", "2")
    assert cards["Unknown deliveries"] == ("/notifications/unknown", "1")
    assert cards["Nodes alive"] == ("/nodes/", "1")
    assert cards["Tasks"][1] == str(len(scheduler.refresh_tasks()))
    assert cards["success"] == ("/executions/?status=success", "4")
    assert cards["failed"] == ("/executions/?status=failed", "3")
    assert cards["running"] == ("/executions/?status=running", "0")
    rules = {str(rule) for rule in app.url_map.iter_rules()}
    for href, _figure in cards.values():  # every link leads to a page
        assert href.split("?")[0] in rules, href
        assert client.get(href).status_code == 200, href
    assert 'hx-get="/overview/counters" hx-trigger="every 5s"' in page
    assert "style=" not in page and "<script>" not in page


def test_counters_fragment(app: Flask, client: FlaskClient, auth: Auth) -> None:
    insert_rows(app.extensions["hai_engine"], executions, [execution_row("u-1", 1_000, "unknown")])
    _login_viewer(app, auth)
    fragment = client.get("/overview/counters", headers={"HX-Request": "true"})
    body = fragment.get_data(as_text=True)
    assert fragment.status_code == 200 and "<html" not in body and "HX-Request" in fragment.headers["Vary"]
    assert _cards(body)["Unknown executions"] == ("/executions/unknown", "1")
    assert "<html" in client.get("/overview/counters").get_data(as_text=True)  # without HTMX: the whole page
    chart = client.get("/overview/chart", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert chart.lstrip().startswith("<figure") and "<svg" in chart


def test_chart_shows_the_last_day_per_hour(app: Flask, client: FlaskClient, auth: Auth) -> None:
    engine = app.extensions["hai_engine"]
    scheduler = app.extensions["hai_scheduler"]
    set_clock_offset(engine, -3 * HOUR_MS)  # journal two failures three hours ago (DB clock)
    try:
        earlier = journal_pending(engine, 2, prefix="earlier")
    finally:
        set_clock_offset(engine, 0)
    now = db_now(engine)
    insert_rows(engine, executions, [execution_row("recent-ok", now - 1, "success"),
                                     execution_row("too-old", now - 25 * HOUR_MS, "failed")])
    _login_viewer(app, auth)
    page = client.get("/").get_data(as_text=True)
    bars = {start: (int(total), int(failures)) for start, total, failures in re.findall(
        r'data-start="([^"]+)" data-total="(\d+)"\s+data-failures="(\d+)"', page)}
    assert len(bars) == 24
    created = scheduler.execution.get(earlier[0]).created_at
    earlier_hour = app.jinja_env.filters["iso"](created // HOUR_MS * HOUR_MS)
    current_hour = app.jinja_env.filters["iso"](now // HOUR_MS * HOUR_MS)
    assert bars[earlier_hour] == (2, 2) and bars[current_hour] == (1, 0)
    assert sum(total for total, _ in bars.values()) == 3  # the row of 25 h ago is not on the chart
    assert page.count('class="chart-bar-total"') == 2 and page.count('class="chart-bar-failures"') == 1
    assert "style=" not in page
