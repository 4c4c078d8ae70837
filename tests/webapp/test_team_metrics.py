"""``/metrics`` per team (docs/teams.md), on every database: a personal API token scrapes what
its user may see now (their teams' series and counts), the deployment's scrape (its token or
address) every team's with a ``team`` label on each per-task series; a team's series are exactly
the global scrape's series of that team; a deleted task keeps its team label; a token whose user
sees no team, an unknown or revoked one, or one over its rate limit is refused."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import text
from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from scheduler_core.db.tables import executions, logs
from scheduler_core.runtime.metrics import METRIC_NAMES
from tests.helpers.journal import abandon_running_execution, db_now, execution_row, insert_rows, log_row
from tests.webapp.api_support import queued_row
from tests.webapp.test_metrics import families, value
from webapp.node import accounts_of, scheduler_of

HOOK = {"kind": "hook"}
OURS = TaskDefinition(id="ops-report", name="Ops report", cron="0 2 * * *", team="ops", handler=HOOK)
GONE = TaskDefinition(id="ops-gone", name="Ops gone", cron="0 4 * * *", team="ops", handler=HOOK)
THEIRS = TaskDefinition(id="billing-run", name="Billing run", cron="0 3 * * *", handler=HOOK)  # team default
Found = dict[str, dict[tuple[tuple[str, str], ...], float]]


@pytest.fixture
def teams_app(db_app: Flask) -> Flask:
    """ops: a task that ran twice, a task that ran once and was deleted, a dead letter; default: a
    task that ran once, a run in progress and a cron occurrence started late, two dead letters; one
    dead letter of no team."""
    accounts_of(db_app).create_team("ops", "Operations")
    scheduler = scheduler_of(db_app)
    scheduler.set_hooks({"on_task_execute": lambda event: "ok"})
    for task in (OURS, GONE, THEIRS):
        scheduler.register(task)
    for task_id in (OURS.id, OURS.id, GONE.id, THEIRS.id):
        assert scheduler.trigger(task_id).status == "success"
    scheduler.unregister(GONE.id)
    engine = db_app.extensions["hai_engine"]
    abandon_running_execution(engine, THEIRS.id, started=True, lease_ms=600_000)
    for team in ("ops", "default", "default", None):
        queued_row(engine, "dead", team=team)
    now = db_now(engine)  # a cron occurrence of default's, started 1.5 s after its minute
    minute = now - now % 60_000
    cron = execution_row(str(uuid.uuid4()), now, task_id=THEIRS.id) | {"trigger": "cron", "scheduled_minute": minute}
    insert_rows(engine, executions, [cron])
    insert_rows(engine, logs, [log_row(str(uuid.uuid4()), minute + 1_500, task_id=THEIRS.id)
                               | {"occurrence_id": cron["occurrence_id"], "trigger": "cron"}])
    return db_app


def _token(app: Flask, name: str, role: str | None, grants: dict[str, str]) -> dict[str, str]:
    accounts = accounts_of(app)
    accounts.create(name, "viewer", generate_password_hash(f"{name}-password-1"))
    user = accounts.set_role(name, role, accounts.get(name).updated_at)
    accounts.set_grants(name, grants, user.updated_at)
    return {"Authorization": f"Bearer {app.extensions['hai_api_tokens'].create(name, 'scrape').secret}"}


def _scrape(app: Flask, headers: dict[str, str] | None = None) -> Any:
    return app.test_client().get("/metrics", headers=headers or {})  # from 127.0.0.1: the allow-list's


COUNTERS = ("hai_executions", "hai_lease_takeovers", "hai_missed_occurrences")


def _team_series(found: Found, team: str) -> Found:
    """The counter samples of ``found`` that carry ``team`` as their team label, by family. (The
    24-hour gauge's busiest 100 are the scrape's own: a team's busiest tasks have their series.)"""
    return {name: {labels: v for labels, v in found[name].items() if ("team", team) in labels} for name in COUNTERS}


def test_a_teams_token_reads_its_teams_series_and_counts_only(teams_app: Flask) -> None:
    answer = _scrape(teams_app, _token(teams_app, "olga", None, {"ops": "viewer"}))
    assert answer.status_code == 200, answer.get_data(as_text=True)
    body = answer.get_data(as_text=True)
    assert OURS.id in body and GONE.id in body and THEIRS.id not in body
    ours, every = families(body), families(_scrape(teams_app).get_data(as_text=True))
    assert set(METRIC_NAMES) <= set(ours)
    teams = {dict(labels).get("team") for samples in ours.values() for labels in samples} - {None}
    assert teams == {"ops"}
    assert _team_series(ours, "ops") == _team_series(every, "ops")  # the same counters as the global scrape's
    assert _team_series(ours, "ops")["hai_executions"]
    assert value(ours, "hai_executions", "hai_executions_total", task=OURS.id, status="success") == 2
    assert value(ours, "hai_executions_last_24h", task=OURS.id, team="ops", status="success") == 2
    # ops-gone was deleted: its series keep their team (and stay the team's to read)
    assert value(ours, "hai_executions", "hai_executions_total", task=GONE.id, team="ops", status="success") == 1
    assert value(every, "hai_executions", "hai_executions_total", task=THEIRS.id, team="default",
                 status="success") == 1
    # the counts are of what the team sees; every team's are more
    assert (value(ours, "hai_tasks"), value(every, "hai_tasks")) == (1, 2)
    assert (value(ours, "hai_executions_open", status="running"),
            value(every, "hai_executions_open", status="running")) == (0, 1)
    assert (value(ours, "hai_notification_dead_letters"), value(every, "hai_notification_dead_letters")) == (1, 4)
    assert (value(ours, "hai_notification_queue", status="dead"),
            value(every, "hai_notification_queue", status="dead")) == (1, 4)
    assert (value(ours, "hai_lease_takeovers_last_24h"), value(every, "hai_lease_takeovers_last_24h")) == (0, 0)
    assert (sum(ours["hai_notification_deliveries_last_24h"].values()),
            sum(every["hai_notification_deliveries_last_24h"].values())) == (1, 4)
    assert ours["hai_notification_deliveries"] == {}  # counted by provider, not by team: global scrapes only
    window = "hai_fire_lateness_last_hour_occurrences"
    assert (value(ours, window, within_seconds="+Inf"), value(every, window, within_seconds="+Inf")) == (0, 1)


def test_a_global_role_and_the_deployments_scrape_read_every_team(teams_app: Flask) -> None:
    every = families(_scrape(teams_app).get_data(as_text=True))
    watcher = families(_scrape(teams_app, _token(teams_app, "gwen", "viewer", {})).get_data(as_text=True))
    assert watcher["hai_executions"] == every["hai_executions"]
    assert watcher["hai_tasks"] == every["hai_tasks"]
    assert {dict(labels)["team"] for labels in every["hai_executions"]} == {"ops", "default"}


def test_the_tasks_beyond_the_series_bound_count_as_other_of_their_team(teams_app: Flask,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("scheduler_core.runtime.metrics.MAX_TASK_SERIES", 1)
    every = families(_scrape(teams_app).get_data(as_text=True))
    ours = families(_scrape(teams_app, _token(teams_app, "olga", None, {"ops": "viewer"})).get_data(as_text=True))
    counted = {(dict(labels)["task"], dict(labels)["team"]): v for labels, v in every["hai_executions"].items()}
    # ops-report, counted first, keeps its series; the later ones are their own team's _other
    assert counted == {(OURS.id, "ops"): 2, ("_other", "ops"): 1, ("_other", "default"): 1}
    assert _team_series(ours, "ops") == _team_series(every, "ops")
    assert sum(ours["hai_executions"].values()) == 3


def test_a_token_is_refused_when_its_user_sees_no_team_or_it_is_not_valid(teams_app: Flask) -> None:
    nobody = _scrape(teams_app, _token(teams_app, "nora", None, {}))
    assert nobody.status_code == 403 and "nora may see no team" in nobody.get_data(as_text=True)
    unknown = _scrape(teams_app, {"Authorization": "Bearer hai_" + "x" * 40})
    assert unknown.status_code == 401 and unknown.headers["WWW-Authenticate"].startswith("Bearer")
    tokens = teams_app.extensions["hai_api_tokens"]
    made = tokens.create("admin", "revoked-scrape")
    assert tokens.revoke("admin", made.token.id)
    assert _scrape(teams_app, {"Authorization": f"Bearer {made.secret}"}).status_code == 401


def test_a_grant_removed_is_gone_for_the_next_scrape(teams_app: Flask) -> None:
    headers = _token(teams_app, "olga", None, {"ops": "viewer"})
    assert OURS.id in _scrape(teams_app, headers).get_data(as_text=True)
    accounts = accounts_of(teams_app)
    accounts.set_grants("olga", {"default": "viewer"}, accounts.get("olga").updated_at)
    moved = _scrape(teams_app, headers).get_data(as_text=True)
    assert THEIRS.id in moved and OURS.id not in moved
    accounts.set_grants("olga", {}, accounts.get("olga").updated_at)
    assert _scrape(teams_app, headers).status_code == 403


def test_a_team_scrape_counts_against_its_tokens_rate_limit(teams_app: Flask) -> None:
    headers = _token(teams_app, "olga", None, {"ops": "viewer"})
    teams_app.config["API_RATE_LIMIT"] = 2
    assert [_scrape(teams_app, headers).status_code for _ in range(2)] == [200, 200]
    over = _scrape(teams_app, headers)
    assert over.status_code == 429 and int(over.headers["Retry-After"]) >= 1


def test_a_task_id_made_again_in_another_team_counts_apart(teams_app: Flask) -> None:
    """Counts are made under the team the task is in at that moment: ops-gone made again in default
    neither shows ops's count to default (not even before it runs) nor takes it from ops."""
    scheduler = scheduler_of(teams_app)
    again = TaskDefinition(id=GONE.id, name="Gone again", cron="0 5 * * *", handler=HOOK)
    scheduler.register(again)
    theirs = _token(teams_app, "dora", None, {"default": "viewer"})
    before = families(_scrape(teams_app, theirs).get_data(as_text=True))
    assert all(("task", GONE.id) not in labels for labels in before["hai_executions"])
    assert scheduler.trigger(GONE.id).status == "success"
    scheduler.unregister(GONE.id)
    every = families(_scrape(teams_app).get_data(as_text=True))
    for team in ("ops", "default"):
        assert value(every, "hai_executions", "hai_executions_total", task=GONE.id, team=team, status="success") == 1
    ours = families(_scrape(teams_app, _token(teams_app, "olga", None, {"ops": "viewer"})).get_data(as_text=True))
    assert value(ours, "hai_executions", "hai_executions_total", task=GONE.id, status="success") == 1


def test_a_moved_task_leaves_its_counts_to_the_team_they_were_made_in(teams_app: Flask,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """No counter series goes down or changes team: the moved task's earlier counts stay ops's
    (its own series, and ops's _other past the series bound); its later ones are default's."""
    monkeypatch.setattr("scheduler_core.runtime.metrics.MAX_TASK_SERIES", 1)
    scheduler = scheduler_of(teams_app)
    first = _counters(_scrape(teams_app))
    assert scheduler.update_task(OURS.id, team="default").team == "default"
    assert scheduler.trigger(OURS.id).status == "success"
    later = _counters(_scrape(teams_app))
    assert {key: v for key, v in first.items() if later.get(key, -1) < v} == {}  # nothing went down
    assert later[(OURS.id, "ops", "success")] == 2 and later[(OURS.id, "default", "success")] == 1


def _counters(answer: Any) -> dict[tuple[str, str, str], float]:
    found = families(answer.get_data(as_text=True))
    return {(dict(labels)["task"], dict(labels)["team"], dict(labels)["status"]): v
            for labels, v in found["hai_executions"].items()}


def test_a_team_scrape_while_the_tokens_cannot_be_read_answers_503_in_plain_text(teams_app: Flask) -> None:
    headers = _token(teams_app, "olga", None, {"ops": "viewer"})
    engine = teams_app.extensions["hai_engine"]
    with engine.begin() as conn:  # the token's table does not answer (as a database that is away)
        conn.execute(text("ALTER TABLE api_tokens RENAME TO api_tokens_away"))
    try:
        answer = _scrape(teams_app, headers)
    finally:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE api_tokens_away RENAME TO api_tokens"))
    assert answer.status_code == 503 and answer.mimetype == "text/plain", answer.get_data(as_text=True)[:300]
    assert "could not be checked" in answer.get_data(as_text=True)
    assert _scrape(teams_app, headers).status_code == 200
