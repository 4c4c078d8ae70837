"""One time format on every page: UTC with the zone named and on hover (``webapp/timefmt.py``),
relative where people think in durations (heartbeats); the browser rewrites the text into the
viewer's zone (tests/browser/test_evidence.py)."""

from __future__ import annotations

import re
from pathlib import Path

from flask import Flask
from flask.testing import FlaskClient

from scheduler_core import TaskDefinition
from tests.webapp.conftest import Auth
from webapp.timefmt import ago, span, when

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
TIME = re.compile(r"<time\b[^>]*>.*?</time>", re.S)
ABSOLUTE = re.compile(r'<time datetime="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)" '
                      r'title="(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC)">\2</time>')
RELATIVE = re.compile(r'<time datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC" '
                      r"data-relative>(just now|in \d+ (s|min|h|d)|\d+ (s|min|h|d) ago)</time>")


def test_no_template_writes_a_time_by_hand() -> None:
    """Every instant goes through the ``when`` / ``ago`` filters: one format, one place."""
    by_hand = [f"{path.relative_to(TEMPLATES)}:{n}" for path in TEMPLATES.rglob("*.html")
               for n, line in enumerate(path.read_text().splitlines(), 1) if "<time" in line]
    assert by_hand == []


def test_the_filters() -> None:
    assert when(1_764_572_634_000) == ('<time datetime="2025-12-01T07:03:54Z" title="2025-12-01 07:03:54 UTC">'
                                       "2025-12-01 07:03:54 UTC</time>")
    assert when(None) == "" and when(None, "never") == "never" and when(None, "<b>") == "&lt;b&gt;"
    assert ">3 s ago<" in ago(1_000, 4_500) and ">just now<" in ago(1_000, 1_400)
    assert ">5 min ago<" in ago(0, 300_000) and ">in 12 s<" in ago(12_000, 0) and ">2 d ago<" in ago(0, 2 * 86_400_000)
    assert 'title="1970-01-01 00:00:01 UTC"' in ago(1_000, 4_500)
    assert [span(v) for v in (None, 850, 12_400, 185_000, 7_800_000)] == ["", "850 ms", "12.4 s", "3 min 5 s",
                                                                          "2 h 10 min"]


def test_every_time_on_every_page_is_utc_named_with_utc_on_hover(app: Flask, client: FlaskClient,
                                                                 auth: Auth) -> None:
    scheduler = app.extensions["hai_scheduler"]
    scheduler.set_hooks({"on_task_execute": lambda event: "ok"})
    scheduler.register(TaskDefinition(id="clock", name="Clock", cron="0 2 * * *"))
    log = scheduler.trigger("clock")
    scheduler.start()  # a heartbeat for the nodes page
    try:
        auth.login()
        pages = ["/", "/tasks/", "/tasks/view/clock", "/executions/", "/logs/", f"/logs/entry/{log.id}", "/nodes/",
                 "/audit/", "/users/", "/users/manage/admin"]
        seen = 0
        for path in pages:
            response = client.get(path)
            assert response.status_code == 200, path
            for element in TIME.findall(response.get_data(as_text=True)):
                assert ABSOLUTE.fullmatch(element) or RELATIVE.fullmatch(element), f"{path}: {element}"
                seen += 1
        assert seen >= 10
        nodes = client.get("/nodes/").get_data(as_text=True)
        assert re.search(r"data-relative>(just now|\d+ s ago)</time>", nodes), "the heartbeat reads as '3 s ago'"
    finally:
        scheduler.stop()
