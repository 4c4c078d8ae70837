"""The task form says what a schedule means: the next five runs in the task's zone with the DST
rule marked where it placed a run, the catch-up window in words, and the node groups live nodes
serve (a stopped node's groups are not offered)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from flask import Flask
from flask.testing import FlaskClient

from scheduler_core.cron import dst_note, upcoming
from scheduler_core.model import TaskDefinition
from scheduler_core.store.nodes import NodeRepository
from scheduler_core.testing import set_clock_offset
from tests.webapp.conftest import Auth
from webapp.node import scheduler_of
from webapp.tasks import duration_ms


def _ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(("cron", "zone", "start", "fire", "note"), [
    # Berlin springs forward 2027-03-28 02:00 -> 03:00: 02:30 does not exist; it runs at 03:00 CEST (01:00 UTC).
    ("30 2 * * *", "Europe/Berlin", _ms(2027, 3, 27, 12), _ms(2027, 3, 28, 1), "02:30 does not exist that day"),
    # Berlin falls back 2027-10-31 03:00 -> 02:00: 02:30 happens twice; it runs once, at the first (00:30 UTC).
    ("30 2 * * *", "Europe/Berlin", _ms(2027, 10, 30, 12), _ms(2027, 10, 31, 0, 30), "runs once, in the first pass"),
    # An elapsed-time schedule runs in both passes: the second 02:30 is 01:30 UTC.
    ("30 * * * *", "Europe/Berlin", _ms(2027, 10, 31, 0, 45), _ms(2027, 10, 31, 1, 30), "this is the second"),
    # New York springs forward 2027-03-14 02:00 -> 03:00.
    ("15 2 * * *", "America/New_York", _ms(2027, 3, 13, 12), _ms(2027, 3, 14, 7), "02:15 does not exist that day"),
])
def test_dst_note_names_the_rule_that_placed_a_run(cron: str, zone: str, start: int, fire: int, note: str) -> None:
    runs = upcoming(cron, zone, start, 5)
    assert fire in runs
    assert note in (dst_note(cron, zone, fire) or "")
    # every other run of those five is an ordinary one
    assert [run for run in runs if dst_note(cron, zone, run)] == [fire]


def test_an_ordinary_day_and_an_elapsed_schedule_in_a_gap_carry_no_note() -> None:
    assert dst_note("30 2 * * *", "Europe/Berlin", _ms(2027, 3, 30, 0, 30)) is None
    assert dst_note("0 3 * * *", "Europe/Berlin", _ms(2027, 3, 28, 1)) is None  # 03:00 exists
    # */30 skips the missing hour: 03:00 CEST is its own match, not a moved 02:00
    assert dst_note("*/30 * * * *", "Europe/Berlin", _ms(2027, 3, 28, 1)) is None
    assert dst_note("30 2 * * *", "UTC", _ms(2027, 3, 28, 2, 30)) is None


def _at(app: Flask, when_ms: int) -> None:
    set_clock_offset(app.extensions["hai_engine"], when_ms - int(time.time() * 1000))


def _preview(client: FlaskClient, cron: str, zone: str) -> str:
    response = client.get("/tasks/cron-preview", query_string={"cron": cron, "timezone": zone},
                          headers={"HX-Request": "true"})
    assert response.status_code == 200
    return response.get_data(as_text=True)


def test_the_preview_marks_the_run_the_dst_rule_moved(app: Flask, client: FlaskClient, auth: Auth) -> None:
    _at(app, _ms(2027, 3, 27, 12))  # sessions follow the database clock: sign in at that time
    try:
        auth.login()
        shown = _preview(client, "30 2 * * *", "Europe/Berlin")
        assert shown.count('class="dst-note"') == 1
        assert "DST: 02:30 does not exist that day (clocks go forward): runs when the gap ends" in shown
        assert "2027-03-28 03:00 CEST" in shown  # the run, at the gap's end, in the task's zone
        assert 'class="dst-note"' not in _preview(client, "30 2 * * *", "UTC")
        _at(app, _ms(2027, 10, 30, 12))
        auth.login()
        assert "runs once, in the first pass" in _preview(client, "30 2 * * *", "Europe/Berlin")
        scheduler_of(app).register(TaskDefinition(id="berlin", name="B", cron="30 2 * * *", timezone="Europe/Berlin",
                                                  handler={"kind": "hook"}))
        detail = client.get("/tasks/view/berlin").get_data(as_text=True)
        assert "DST: repeated hour (clocks go back): runs once, in the first pass" in detail  # its Next runs
    finally:
        set_clock_offset(app.extensions["hai_engine"], 0)


def test_the_form_offers_the_groups_live_nodes_serve(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    nodes = NodeRepository(app.extensions["hai_engine"])
    nodes.heartbeat("batch-node", "host-a", 11, capabilities=["api"], groups=["batch", "reports"])
    nodes.heartbeat("gone-node", "host-b", 12, capabilities=["api"], groups=["retired"])
    nodes.mark_stopped("gone-node")
    page = client.get("/tasks/new").get_data(as_text=True)
    assert '<datalist id="node_group-live"><option value="batch"><option value="reports"></datalist>' in page
    assert "retired" not in page
    assert "Groups live nodes serve now:" in page


def test_the_form_says_the_catchup_window_in_words() -> None:
    assert duration_ms(3_600_000) == "1 h"
    assert duration_ms(5_400_000) == "1 h 30 min"
    assert duration_ms(7 * 86_400_000) == "7 days"
    assert duration_ms(0) == "0 min"
    assert duration_ms(90_500) == "90.5 s"
