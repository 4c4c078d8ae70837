"""Every address an htmx request fetches a fragment from, opened directly -- a copied link, the
browser's history, a bookmark: without ``HX-Request`` it answers the whole page (the layout, the
stylesheet, the menu) or redirects to the page that holds the fragment, never the bare fragment;
with ``HX-Request`` it still answers the fragment alone. The list below is every route that
renders a fragment (``wants_fragment``, ``page_or_fragment``, a ``_*.html`` template)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from scheduler_core import TaskDefinition
from tests.webapp.conftest import Auth, _dashboard
from webapp.node import scheduler_of

TASK = "nightly-report"
REACH = {"providers": [{"name": "log", "type": "console"}],
         "templates": [{"name": "otp", "provider": "log", "subject": "Code {code}", "body": "Your code is {code}."}]}
SWAP = {"HX-Request": "true"}
LAYOUT = ('<link rel="stylesheet" href="/static/app.css', '<nav aria-label="Main">')

# (address of the fragment, the page it belongs to when opened directly: None = answered in place)
FRAGMENTS = [
    ("/overview/counters", None),
    ("/overview/chart", None),
    ("/tasks/?q=nightly", None),
    ("/tasks/cron-preview?cron=0+3+*+*+*&timezone=Europe/Berlin", None),
    (f"/tasks/occurrences/{TASK}", f"/tasks/view/{TASK}"),
    (f"/tasks/occurrences/{TASK}?before=1700000000000.occ-1", f"/tasks/view/{TASK}?before=1700000000000.occ-1"),
    ("/runs/", None),
    ("/executions/", None),
    ("/executions/running", None),
    ("/logs/", None),
    ("/logs/failures", None),
    ("/notifications/", None),
    ("/notifications/counts?status=dead", "/notifications/?status=dead"),
    ("/notifications/counts", "/notifications/"),
    ("/notifications/dead", None),
    ("/notifications/templates/show/otp?vars=code%3D1", None),
]


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Flask]:
    monkeypatch.delenv("HAI_SECRET_KEY", raising=False)
    for app in _dashboard(f"sqlite:///{tmp_path}/dash.db", REACH=REACH):
        scheduler_of(app).register(TaskDefinition(id=TASK, name="Nightly report", cron="0 3 * * *"))
        yield app


@pytest.fixture
def viewer(world: Flask) -> FlaskClient:
    client = world.test_client()
    assert Auth(client).login().status_code == 302
    return client


def _is_page(response: Any) -> bool:
    body = response.get_data(as_text=True)
    return response.status_code == 200 and body.lstrip().lower().startswith("<!doctype html>") and all(
        part in body for part in LAYOUT)


@pytest.mark.parametrize(("path", "page"), FRAGMENTS, ids=[path for path, _ in FRAGMENTS])
def test_a_fragment_opened_directly_is_a_whole_page(viewer: FlaskClient, path: str, page: str | None) -> None:
    direct = viewer.get(path)
    if page is None:
        assert _is_page(direct), direct.get_data(as_text=True)[:300]
    else:
        assert direct.status_code in (302, 303) and direct.headers["Location"] == page
        assert _is_page(viewer.get(page))
    boosted = viewer.get(path, headers={**SWAP, "HX-Boosted": "true"}, follow_redirects=True)
    assert _is_page(boosted)  # a boosted link wants the page too


@pytest.mark.parametrize(("path", "page"), FRAGMENTS, ids=[path for path, _ in FRAGMENTS])
def test_htmx_still_gets_the_fragment_alone(viewer: FlaskClient, path: str, page: str | None) -> None:
    swapped = viewer.get(path, headers=SWAP)
    body = swapped.get_data(as_text=True)
    assert swapped.status_code == 200 and "<html" not in body and LAYOUT[0] not in body, body[:300]


def test_the_task_page_still_answers_its_history_to_htmx(viewer: FlaskClient) -> None:
    swapped = viewer.get(f"/tasks/view/{TASK}", headers=SWAP).get_data(as_text=True)
    assert "<html" not in swapped and swapped.startswith('<div id="occurrences">')
