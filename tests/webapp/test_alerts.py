"""The alerts page: rules (configured read-only, stored edited by admins), a test alert, the alerts
raised with their delivery status; every change audited."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from scheduler_core import TaskDefinition
from scheduler_core.cron import MINUTE_MS
from scheduler_core.db import close_engine
from scheduler_core.db.tables import alert_facts
from scheduler_core.store.alerts import AlertRepository
from scheduler_core.store.tasks import TaskRepository
from tests.helpers.http_server import RecordingServer
from tests.webapp.conftest import ADMIN_PASSWORD, Auth, csrf_token
from webapp import create_app
from webapp.node import audit_of, reach_of


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Flask]:
    monkeypatch.delenv("HAI_SECRET_KEY", raising=False)
    with RecordingServer() as receiver:
        reach = {"providers": [{"name": "ops-hook", "type": "api", "url": receiver.url("/echo")}],
                 "templates": [{"name": "alert", "provider": "ops-hook", "body": "{summary} {link}"}],
                 "alerts": [{"name": "configured-rule", "events": ["execution.unknown"], "template": "alert",
                             "to": "ops"}]}
        application = create_app({"DATABASE_URL": f"sqlite:///{tmp_path}/dash.db", "ADMIN_PASSWORD": ADMIN_PASSWORD,
                                  "TESTING": True, "REACH": reach, "PUBLIC_URL": "https://dash.example"})
        application.config["receiver"] = receiver
        yield application
        application.extensions["hai_scheduler"].close()
        application.extensions["hai_reach"].close()
        close_engine(application.extensions["hai_engine"])


def _post(client: FlaskClient, path: str, data: dict[str, Any]) -> Any:
    return client.post(path, data={**data, "csrf_token": csrf_token(client, "/notifications/alerts/")})


RULE = {"name": "billing-failures", "events": ["execution.failed", "execution.missed"], "template": "alert",
        "to": "billing-oncall", "tasks": "billing-*", "throttle_s": "300", "after_min": "10"}


def test_an_admin_creates_tests_edits_and_deletes_a_stored_rule(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    page = client.get("/notifications/alerts/").get_data(as_text=True)
    assert "configured-rule" in page and "(configured)" in page
    bad = _post(client, "/notifications/alerts/rules/new", {**RULE, "throttle_s": "0"})
    assert bad.status_code == 400 and "between 1000 and 604800000" in bad.get_data(as_text=True)
    assert _post(client, "/notifications/alerts/rules/new", RULE).status_code == 303
    page = client.get("/notifications/alerts/").get_data(as_text=True)
    assert "billing-failures" in page and "matches no task now" in page  # no billing-* task yet
    reach_of(app).alerts._stored_at = 0.0
    app.extensions["hai_scheduler"].register(TaskDefinition(id="billing-eu", name="Billing EU", cron="0 3 * * *"))
    app.extensions["hai_scheduler"].refresh_tasks()
    assert "matches no task now" not in client.get("/notifications/alerts/").get_data(as_text=True)
    assert _post(client, "/notifications/alerts/rules/test/billing-failures", {}).status_code == 303
    receiver: RecordingServer = app.config["receiver"]
    (sent,) = [r.json() for r in receiver.requests]
    assert sent["to"] == "billing-oncall" and "test alert of rule billing-failures" in sent["body"]
    assert "https://dash.example/notifications/alerts" in sent["body"]
    assert "sent" in client.get("/notifications/alerts/").get_data(as_text=True)
    version = reach_of(app).alerts.stored_versions()["billing-failures"]
    edited = _post(client, "/notifications/alerts/rules/edit/billing-failures",
                   {**RULE, "to": "billing-team", "expected_updated_at": str(version)})
    assert edited.status_code == 303
    assert [r.to for r in reach_of(app).alerts.rules() if r.name == "billing-failures"] == ["billing-team"]
    stale = _post(client, "/notifications/alerts/rules/delete/billing-failures", {"expected_updated_at": str(version)})
    assert stale.status_code == 303 and "billing-failures" in reach_of(app).alerts.stored_versions()
    new_version = reach_of(app).alerts.stored_versions()["billing-failures"]
    assert _post(client, "/notifications/alerts/rules/delete/billing-failures",
                 {"expected_updated_at": str(new_version)}).status_code == 303
    assert "billing-failures" not in reach_of(app).alerts.stored_versions()
    actions = [e.action for e in audit_of(app).list()]
    assert {"alert_rule.create", "alert_rule.test", "alert_rule.update", "alert_rule.delete"} <= set(actions)


def test_a_configured_rule_cannot_be_edited_here(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    assert client.get("/notifications/alerts/rules/edit/configured-rule").status_code == 404
    shadow = _post(client, "/notifications/alerts/rules/new", {**RULE, "name": "configured-rule"})
    assert shadow.status_code == 400 and "read-only" in shadow.get_data(as_text=True)


def test_a_rule_naming_a_missing_template_is_refused_on_its_field(app: Flask, client: FlaskClient,
                                                                   auth: Auth) -> None:
    auth.login()
    response = _post(client, "/notifications/alerts/rules/new", {**RULE, "template": "nope"})
    page = response.get_data(as_text=True)
    assert response.status_code == 400 and 'id="template-error">names no template' in page
    assert reach_of(app).alerts.stored_versions() == {}


def test_the_health_view_shows_an_idle_cluster_and_raises_its_alert_once(app: Flask, client: FlaskClient,
                                                                          auth: Auth) -> None:
    engine = app.extensions["hai_engine"]
    reach_of(app).alerts.save_rule({"name": "cluster-down", "events": ["cluster.idle"], "template": "alert",
                                    "to": "ops", "after_ms": 120_000})
    assert client.get("/healthz").json["cluster"] == {"state": "no_node_yet", "ticked_through_ms": None,
                                                      "idle_s": None}
    auth.login()
    assert "No scheduler node has run against this database yet" in client.get("/").get_data(as_text=True)
    now_ms, _ = AlertRepository(engine).cluster_clock()
    through = now_ms - now_ms % MINUTE_MS - 5 * MINUTE_MS  # the last node planned five minutes ago
    TaskRepository(engine).advance_watermark(through)
    health = client.get("/healthz")
    assert health.status_code == 200, "the dashboard is healthy; the nodes are not"
    assert health.json["cluster"] == {"state": "idle", "ticked_through_ms": through, "idle_s": 240}
    for page in ("/", "/nodes/"):
        assert "No node has planned for 4 minute(s)" in client.get(page).get_data(as_text=True), page
    with engine.connect() as conn:
        raised = list(conn.execute(select(alert_facts.c.rule, alert_facts.c.event_key)))
    assert raised == [("cluster-down", f"cluster.idle:{through + MINUTE_MS}")], "one alert, whoever looked"
    TaskRepository(engine).advance_watermark(now_ms - now_ms % MINUTE_MS)  # a node is back
    assert client.get("/healthz").json["cluster"]["state"] == "ticking"
    assert 'id="cluster-idle"' not in client.get("/").get_data(as_text=True)
