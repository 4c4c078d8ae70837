"""Notifications and alert rules per team (docs/teams.md), through the pages and the API, on every
database: a member settles their teams' dead letters and unknown deliveries by their role there,
a bulk requeue takes only theirs, a message about no one team is a global user's, and a team's
admin keeps alert rules in their own teams only."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from werkzeug.security import generate_password_hash

from scheduler_core.access import Scope
from scheduler_core.statuses import QueueStatus
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.webapp.api_support import queued_row
from tests.webapp.conftest import Auth
from tests.webapp.test_team_tasks import _member, _post, _token
from webapp.node import accounts_of, audit_of, reach_of


@pytest.fixture
def teams_app(db_app: Flask) -> Flask:
    accounts_of(db_app).create_team("ops", "Operations")
    reach_of(db_app).templates.create("team-alert", "log", "{summary}")
    return db_app


def _status(app: Flask, queue_id: str) -> str:
    entry = reach_of(app).queue.get(queue_id)
    assert entry is not None
    return entry.status


def _version(app: Flask, queue_id: str) -> int:
    entry = reach_of(app).queue.get(queue_id)
    assert entry is not None
    return entry.updated_at


def test_a_member_requeues_their_teams_dead_letters_and_only_theirs(teams_app: Flask) -> None:
    engine = teams_app.extensions["hai_engine"]
    theirs, nobodys = queued_row(engine, "dead", team="default"), queued_row(engine, "dead")  # older than ours
    ours = [queued_row(engine, "dead", team="ops") for _ in range(2)]
    viewer, operator = _member(teams_app, "vic", {"ops": "viewer"}), _member(teams_app, "olga", {"ops": "operator"})
    listed = viewer.get("/notifications/dead").get_data(as_text=True)
    assert all(q in listed for q in ours) and theirs not in listed and nobodys not in listed
    refused = _post(viewer, f"/notifications/dead/{ours[0]}/requeue",
                    {"expected_updated_at": _version(teams_app, ours[0])}, "/notifications/dead")
    assert refused.status_code == 403 and _status(teams_app, ours[0]) == "dead"  # seen, but a viewer there
    for other in (theirs, nobodys):  # another team's, no team's: as if there were none
        answer = _post(operator, f"/notifications/dead/{other}/requeue",
                       {"expected_updated_at": _version(teams_app, other)}, "/notifications/dead")
        assert answer.status_code == 404 and _status(teams_app, other) == "dead"
    set_clock_offset(engine, clock_offset(engine) + 5_000)  # past the preview's settle grace (1 s)
    preview = operator.get("/notifications/dead/bulk").get_data(as_text=True)
    assert 'name="count" value="2"' in preview, preview
    fields = {name: _field(preview, name) for name in ("bound_at", "bound_id", "count")}
    done = _post(operator, "/notifications/dead/bulk", fields, "/notifications/dead/bulk")
    assert done.status_code == 303
    assert [_status(teams_app, q) for q in (*ours, theirs, nobodys)] == ["pending", "pending", "dead", "dead"]
    ops_trail = audit_of(teams_app).list(None, "notification.bulk_requeue", 10, 0, Scope(frozenset({"ops"})))
    assert [e.actor for e in ops_trail] == ["olga"]  # the entry is ops's: its members read it
    accounts = accounts_of(teams_app)  # gwen sees every team's messages and settles ops's only
    accounts.create("gwen", "viewer", generate_password_hash("gwen-password-1"))
    accounts.set_grants("gwen", {"ops": "operator"}, accounts.get("gwen").updated_at)
    watcher = teams_app.test_client()
    assert Auth(watcher).login("gwen", "gwen-password-1").status_code == 302
    answer = _post(watcher, f"/notifications/dead/{nobodys}/requeue",
                   {"expected_updated_at": _version(teams_app, nobodys)}, "/notifications/dead")
    assert answer.status_code == 403 and _status(teams_app, nobodys) == "dead"  # no one team's: a global role's
    admin = teams_app.test_client()  # a global operator settles the message of no one team
    assert Auth(admin).login().status_code == 302
    answer = _post(admin, f"/notifications/dead/{nobodys}/requeue",
                   {"expected_updated_at": _version(teams_app, nobodys)}, "/notifications/dead")
    assert answer.status_code == 303 and _status(teams_app, nobodys) == "pending"


def _field(page: str, name: str) -> str:
    marker = f'name="{name}" value="'
    start = page.index(marker) + len(marker)
    return page[start:page.index('"', start)]


def test_the_api_settles_a_teams_unknown_delivery_by_the_role_there(teams_app: Flask) -> None:
    engine = teams_app.extensions["hai_engine"]
    ours, theirs = queued_row(engine, "unknown", team="ops"), queued_row(engine, "unknown", team="default")
    _member(teams_app, "vic", {"ops": "viewer"})
    _member(teams_app, "val", {"ops": "viewer", "default": "operator"})  # an operator, but not in ops
    _member(teams_app, "olga", {"ops": "operator"})
    client, tokens = teams_app.test_client(), {who: _token(teams_app, who) for who in ("vic", "val", "olga")}

    def resolve(who: str, queue_id: str) -> Any:
        body = {"status": "discarded", "reason": "checked with the provider",
                "expected_updated_at": _version(teams_app, queue_id)}
        return client.post(f"/api/v1/notifications/resolve/{queue_id}", json=body, headers=tokens[who])

    listed = client.get("/api/v1/notifications/unknown", headers=tokens["vic"]).get_json()
    assert [row["queue_id"] for row in listed["rows"]] == [ours]
    assert resolve("vic", ours).status_code == 403 and resolve("val", ours).status_code == 403
    assert resolve("olga", theirs).status_code == 404
    assert [_status(teams_app, q) for q in (ours, theirs)] == ["unknown", "unknown"]
    assert resolve("olga", ours).status_code == 200 and _status(teams_app, ours) == QueueStatus.DISCARDED


RULE = {"events": "execution.failed", "template": "team-alert", "to": "ops-pager", "throttle_s": "600",
        "after_min": "10"}


def test_a_teams_admin_keeps_alert_rules_in_their_teams_only(teams_app: Flask) -> None:
    admin_of_ops = _member(teams_app, "ada", {"ops": "admin", "default": "operator"})
    page = "/notifications/alerts/rules/new"
    form = admin_of_ops.get(page).get_data(as_text=True)
    assert '<option value="ops" selected>' in form and "every team (global)" not in form
    for team, message in (("default", "Names no team you are an admin of"), ("", "needs the global admin role"),
                          ("nobody", "Names no team you are an admin of")):
        refused = _post(admin_of_ops, page, {**RULE, "name": f"r-{team or 'global'}", "team": team}, page)
        assert refused.status_code == 400 and message in refused.get_data(as_text=True), team
    assert reach_of(teams_app).alerts.rules() == []
    made = _post(admin_of_ops, page, {**RULE, "name": "ops-rule", "team": "ops"}, page)
    assert made.status_code == 303, made.get_data(as_text=True)
    (rule,) = reach_of(teams_app).alerts.rules()
    assert (rule.name, rule.team) == ("ops-rule", "ops")
    moved = _post(admin_of_ops, "/notifications/alerts/rules/edit/ops-rule",
                  {**RULE, "team": "default", "expected_updated_at": reach_of(teams_app).alerts.stored_versions()[
                      "ops-rule"]}, "/notifications/alerts/rules/edit/ops-rule")
    assert moved.status_code == 400  # not into a team they are no admin of
    global_admin = teams_app.test_client()
    assert Auth(global_admin).login().status_code == 302
    made = _post(global_admin, page, {**RULE, "name": "everyone", "team": ""}, page)
    assert made.status_code == 303
    listed = admin_of_ops.get("/notifications/alerts/").get_data(as_text=True)
    assert "ops-rule" in listed and "everyone" not in listed  # a global rule is the global admins'
    for path in ("/notifications/alerts/rules/edit/everyone",):
        assert admin_of_ops.get(path).status_code == 404
    deleted = _post(admin_of_ops, "/notifications/alerts/rules/delete/everyone",
                    {"expected_updated_at": reach_of(teams_app).alerts.stored_versions()["everyone"]},
                    "/notifications/alerts/")
    assert deleted.status_code == 404 and {r.name for r in reach_of(teams_app).alerts.rules()} == {"ops-rule",
                                                                                                  "everyone"}
    viewer = _member(teams_app, "vic", {"ops": "viewer", "default": "admin"})
    assert viewer.get("/notifications/alerts/rules/edit/ops-rule").status_code == 403  # seen, not an admin there
    moved = _post(global_admin, "/notifications/alerts/rules/edit/everyone",  # a global rule given to ops
                  {**RULE, "team": "ops", "expected_updated_at": reach_of(teams_app).alerts.stored_versions()[
                      "everyone"]}, "/notifications/alerts/rules/edit/everyone")
    assert moved.status_code == 303
    ops_trail = audit_of(teams_app).list(None, "alert_rule.update", 10, 0, Scope(frozenset({"ops"})))
    assert ops_trail == []  # its entry holds what it was as a global rule: not ops's to read
