"""A task belongs to one team (docs/teams.md), on every database: its members see it, act on it by
their role there, and put tasks only in teams they are an admin of; anyone else gets the answer a
task that does not exist gets (404), through the pages and the API alike. Moving a task keeps its
earlier runs in the team they ran under."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select
from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from scheduler_core.access import Scope
from scheduler_core.db.tables import executions, logs
from scheduler_core.errors import ConfigError
from tests.helpers.journal import db_now, execution_row, insert_rows, wait_for_status
from tests.webapp.conftest import Auth, csrf_token
from webapp.node import accounts_of, audit_of, scheduler_of

HOOK = {"kind": "hook"}
OURS = TaskDefinition(id="ops-report", name="Ops report", cron="0 2 * * *", team="ops", handler=HOOK)
THEIRS = TaskDefinition(id="billing-run", name="Billing run", cron="0 3 * * *", handler=HOOK)  # team default


def _member(app: Flask, name: str, grants: dict[str, str]) -> FlaskClient:
    """A signed-in browser of ``name``: no global role, ``grants`` per team."""
    accounts = accounts_of(app)
    accounts.create(name, "viewer", generate_password_hash(f"{name}-password-1"))
    user = accounts.set_role(name, None, accounts.get(name).updated_at)
    accounts.set_grants(name, grants, user.updated_at)
    client = app.test_client()
    assert Auth(client).login(name, f"{name}-password-1").status_code == 302
    return client


def _token(app: Flask, name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {app.extensions['hai_api_tokens'].create(name, 'team-test').secret}"}


@pytest.fixture
def teams_app(db_app: Flask) -> Flask:
    accounts_of(db_app).create_team("ops", "Operations")
    scheduler = scheduler_of(db_app)
    scheduler.set_hooks({"on_task_execute": lambda event: "ok"})
    scheduler.register(OURS)
    scheduler.register(THEIRS)
    return db_app


def _post(client: FlaskClient, path: str, fields: dict[str, Any], page: str) -> Any:
    return client.post(path, data={**fields, "csrf_token": csrf_token(client, page)})


def test_a_member_sees_only_their_teams_tasks_and_another_teams_task_is_not_found(teams_app: Flask) -> None:
    browser = _member(teams_app, "olga", {"ops": "operator"})
    listed = browser.get("/tasks/").get_data(as_text=True)
    assert "ops-report" in listed and "billing-run" not in listed
    assert browser.get("/tasks/?q=team:default").get_data(as_text=True).count("billing-run") == 0
    missing = browser.get("/tasks/view/no-such-task")
    for path in ("/tasks/view/billing-run", "/tasks/occurrences/billing-run", "/tasks/backfill/billing-run"):
        answer = browser.get(path)
        assert answer.status_code == 404, path
    assert missing.status_code == 404
    trigger = _post(browser, "/tasks/trigger/billing-run", {}, "/tasks/view/ops-report")
    assert trigger.status_code == 404
    assert _post(browser, "/tasks/trigger/ops-report", {}, "/tasks/view/ops-report").status_code == 303

    client, token = teams_app.test_client(), _token(teams_app, "olga")
    page = client.get("/api/v1/tasks", headers=token).get_json()
    assert [row["id"] for row in page["rows"]] == ["ops-report"]
    for method, path in (("GET", "/api/v1/tasks/billing-run"), ("GET", "/api/v1/schedules/billing-run"),
                         ("POST", "/api/v1/tasks/trigger/billing-run")):
        answer = client.open(path, method=method, headers=token, json={} if method == "POST" else None)
        assert answer.status_code == 404, (path, answer.get_json())
        assert answer.get_json()["detail"] == client.open(path.replace("billing-run", "nothing-here"), method=method,
                                                          headers=token, json={} if method == "POST" else None
                                                          ).get_json()["detail"].replace("nothing-here", "billing-run")
    with teams_app.extensions["hai_engine"].connect() as conn:
        assert conn.execute(select(executions.c.occurrence_id).where(executions.c.task_id == "billing-run")).all() == []
        conn.rollback()


def test_a_role_in_the_task_s_team_decides_what_a_member_may_do_there(teams_app: Flask) -> None:
    """Operator in ops and viewer in default: the default task is seen, and its trigger is 403."""
    browser = _member(teams_app, "vera", {"ops": "operator", "default": "viewer"})
    assert browser.get("/tasks/view/billing-run").status_code == 200
    assert _post(browser, "/tasks/trigger/billing-run", {}, "/tasks/view/billing-run").status_code == 403
    assert browser.get("/tasks/edit/ops-report").status_code == 403  # an operator, not an admin, of ops


def test_tasks_are_put_only_in_teams_the_user_is_an_admin_of(teams_app: Flask) -> None:
    scheduler = scheduler_of(teams_app)
    browser = _member(teams_app, "adam", {"ops": "admin", "default": "viewer"})
    form = browser.get("/tasks/new").get_data(as_text=True)
    assert '<option value="ops"' in form and '<option value="default"' not in form
    fields = {"id": "new-one", "name": "New", "cron": "0 4 * * *", "timezone": "UTC", "kind": "hook", "team": "default"}
    refused = _post(browser, "/tasks/new", fields, "/tasks/new")
    assert refused.status_code == 400 and "names no team you are an admin of" in refused.get_data(as_text=True)
    unknown = _post(browser, "/tasks/new", {**fields, "team": "nowhere"}, "/tasks/new")
    assert unknown.status_code == 400 and "names no team you are an admin of: &#39;nowhere&#39;" in \
        unknown.get_data(as_text=True)  # worded alike: no team's existence is told
    assert {t.id for t in scheduler.refresh_tasks()} == {"ops-report", "billing-run"}
    assert _post(browser, "/tasks/new", {**fields, "team": "ops"}, "/tasks/new").status_code == 303
    assert scheduler.task_ops.get("new-one").team == "ops"

    client, token = teams_app.test_client(), _token(teams_app, "adam")
    body = {"id": "api-one", "name": "Api", "cron": "0 5 * * *", "handler": HOOK, "team": "default"}
    answer = client.post("/api/v1/tasks", headers=token, json=body)
    assert (answer.status_code, answer.get_json()["field"]) == (422, "team")
    stored = scheduler.task_ops.get("ops-report")
    moved = client.patch("/api/v1/tasks/ops-report", headers=token,
                         json={"expected_updated_at": stored.updated_at, "team": "default"})
    assert (moved.status_code, moved.get_json()["field"]) == (422, "team")  # admin of ops only: no move
    assert scheduler.task_ops.get("ops-report").team == "ops"


def test_the_store_refuses_a_team_that_does_not_exist(teams_app: Flask) -> None:
    scheduler = scheduler_of(teams_app)
    with pytest.raises(ConfigError) as caught:
        scheduler.register(TaskDefinition(id="x", name="x", cron="0 1 * * *", team="nowhere", handler=HOOK))
    assert caught.value.field == "team"
    stored = scheduler.task_ops.get("ops-report")
    with pytest.raises(ConfigError) as caught:
        scheduler.update_task("ops-report", expected_updated_at=stored.updated_at, team="nowhere")
    assert caught.value.field == "team" and scheduler.task_ops.get("ops-report").team == "ops"
    assert {t.id for t in scheduler.refresh_tasks()} == {"ops-report", "billing-run"}


def test_a_moved_task_leaves_its_runs_with_the_team_they_ran_under(teams_app: Flask) -> None:
    scheduler = scheduler_of(teams_app)
    scheduler.start()
    ran = scheduler.trigger("ops-report")
    wait_for_status(scheduler, ran.occurrence_id, "success")
    stored = scheduler.task_ops.get("ops-report")
    scheduler.update_task("ops-report", expected_updated_at=stored.updated_at, team="default")
    engine = teams_app.extensions["hai_engine"]
    with engine.connect() as conn:
        assert conn.execute(select(executions.c.team).where(executions.c.task_id == "ops-report")).scalars().all() \
            == ["ops"]
        assert set(conn.execute(select(logs.c.team).where(logs.c.task_id == "ops-report")).scalars()) == {"ops"}
        conn.rollback()
    assert scheduler.task_ops.occurrences("ops-report", team="default").rows == []  # not its history there
    assert [e.occurrence_id for e in scheduler.task_ops.occurrences("ops-report", team="ops").rows] == \
        [ran.occurrence_id]
    again = scheduler.trigger("ops-report")
    wait_for_status(scheduler, again.occurrence_id, "success")
    assert [e.occurrence_id for e in scheduler.task_ops.occurrences("ops-report", team="default").rows] == \
        [again.occurrence_id]
    default_viewer = _member(teams_app, "dora", {"default": "viewer"})
    page = default_viewer.get("/tasks/view/ops-report").get_data(as_text=True)
    assert again.occurrence_id in page and ran.occurrence_id not in page
    described = scheduler.describe("ops-report")
    assert [r.occurrence_id for r in described.last_runs] == [again.occurrence_id]
    assert described.counts.since_ms == scheduler.execution.get(again.occurrence_id).created_at

    current = scheduler.task_ops.get("ops-report")
    scheduler.task_ops.delete("ops-report", current.updated_at)  # deleted: its runs stay default's
    with engine.connect() as conn:
        teams = dict(conn.execute(select(executions.c.occurrence_id, executions.c.team)
                                  .where(executions.c.task_id == "ops-report")).all())
        conn.rollback()
    assert teams == {ran.occurrence_id: "ops", again.occurrence_id: "default"}


def test_the_audit_trail_shows_a_member_their_teams_entries_only(teams_app: Flask) -> None:
    """An entry is about the team of its task or run (read as it is written); one about no one team
    (users, tokens) is for global users. A deleted task's entry keeps the team it had."""
    admin = teams_app.test_client()
    assert Auth(admin).login().status_code == 302
    _post(admin, "/tasks/trigger/billing-run", {}, "/tasks/view/billing-run")
    browser = _member(teams_app, "tess", {"ops": "admin"})
    _post(browser, "/tasks/trigger/ops-report", {}, "/tasks/view/ops-report")
    stored = scheduler_of(teams_app).task_ops.get("ops-report")
    assert _post(browser, "/tasks/delete/ops-report", {"expected_updated_at": str(stored.updated_at)},
                 "/tasks/delete/ops-report").status_code == 303
    audit_of(teams_app).record("admin", "user.role", "tess", after={"role": "global-entry-9f"})
    shown = browser.get("/audit/").get_data(as_text=True)
    assert "task.trigger" in shown and "task.delete" in shown  # its trigger (its team read as written), its deletion
    assert "billing-run" not in shown and "global-entry-9f" not in shown
    everything = admin.get("/audit/").get_data(as_text=True)
    assert "billing-run" in everything and "ops-report" in everything and "global-entry-9f" in everything


def test_another_team_s_unknown_run_is_not_found_and_a_viewer_of_its_team_may_not_resolve_it(
        teams_app: Flask) -> None:
    engine = teams_app.extensions["hai_engine"]
    occurrence = str(uuid.uuid4())
    insert_rows(engine, executions, [execution_row(occurrence, db_now(engine), "unknown", THEIRS.id)])
    unknown = scheduler_of(teams_app).execution.get(occurrence)
    form = {"status": "discarded", "reason": "checked the ledger", "expected_updated_at": str(unknown.updated_at)}
    outsider = _member(teams_app, "otto", {"ops": "operator"})
    assert _post(outsider, f"/executions/{occurrence}/resolve", form, "/executions/unknown").status_code == 404
    assert outsider.get(f"/executions/view/{occurrence}").status_code == 404
    watcher = _member(teams_app, "wendy", {"ops": "operator", "default": "viewer"})
    assert watcher.get(f"/executions/view/{occurrence}").status_code == 200
    assert _post(watcher, f"/executions/{occurrence}/resolve", form, "/executions/unknown").status_code == 403
    assert scheduler_of(teams_app).execution.get(occurrence).status == "unknown"


def test_a_run_that_ends_after_its_task_moved_is_the_team_s_it_began_in(teams_app: Flask) -> None:
    """Its journal row is frozen by the move; its log row is written at its end, with no team: it
    is its run's team's (ops), not the task's new one (default). What the task left in ops is not
    its history in default: not its last outcome, not in the run grid, not rerun, and a trigger's
    idempotency key used in ops does not answer that run."""
    release = threading.Event()
    scheduler = scheduler_of(teams_app)
    scheduler.set_hooks({"on_task_execute": lambda event: release.wait(30) and "done"})
    scheduler.start()
    release.set()
    keyed = scheduler.trigger("ops-report", idempotency_key="k-ops")  # ran in ops, by key
    release.clear()
    occurrence = scheduler.submit("ops-report")
    wait_for_status(scheduler, occurrence, "running")
    stored = scheduler.task_ops.get("ops-report")
    scheduler.update_task("ops-report", expected_updated_at=stored.updated_at, team="default")
    release.set()
    done = wait_for_status(scheduler, occurrence, "success")
    ops, default = Scope(frozenset({"ops"})), Scope(frozenset({"default"}))
    log_id = done.attempts[0].log_id
    assert scheduler.execution.log(log_id, ops) is not None and scheduler.execution.log(log_id, default) is None
    assert [r.id for r in scheduler.execution.log_page(task_id="ops-report", scope=default).rows] == []
    assert {e.occurrence_id for e in scheduler.execution.page(task_id="ops-report", scope=ops).rows} == \
        {occurrence, keyed.occurrence_id}
    assert scheduler.execution.page(task_id="ops-report", scope=default).rows == []
    (row,) = scheduler.task_ops.search("ops-report", scope=default).rows  # its last outcome: none in default
    assert row.last is None
    assert "ops-report" in [r.id for r in scheduler.task_ops.search("status:never", scope=default).rows]
    assert scheduler.task_ops.grid("ops-report", scope=default).rows[0].runs == []
    newcomer = _member(teams_app, "nina", {"default": "operator"})  # an operator of the task's team now
    assert _post(newcomer, f"/tasks/rerun/{occurrence}/ops-report", {}, "/tasks/view/ops-report").status_code == 404
    client, token = teams_app.test_client(), _token(teams_app, "nina")
    answer = client.post("/api/v1/tasks/trigger/ops-report", headers=token, json={"idempotency_key": "k-ops"})
    assert (answer.status_code, answer.get_json()["field"]) == (422, "idempotency_key")
    assert keyed.occurrence_id not in answer.get_data(as_text=True)
    fresh = client.post("/api/v1/tasks/trigger/ops-report", headers=token, json={"idempotency_key": "k-default"})
    assert fresh.status_code == 202 and fresh.get_json()["existing"] is False
