"""Every dashboard route and every API operation, called by a member of another team, on SQLite,
PostgreSQL and MariaDB (docs/teams.md, "The rule every surface keeps").

The caller is an admin of team ``ops`` with no global role: every role check lets them through,
so only the team check can stop them. The ``default`` team holds a task, its runs (a success with
its log row, an unknown one, one whose log is still to be written), audit entries about them, an
alert rule, an alert, a dead letter and an unknown delivery; a dead letter of no one team (the
application's own message) is there too, for global users only.
Walking ``app.url_map`` and the API's ``OPERATIONS`` with ``default``'s identifiers in every URL
argument:

- a route or operation naming one of ``default``'s objects answers as it does for an object that
  does not exist (404; the page's own "there is no ..." redirect; or 400 for a form refused before
  any row is read), and one needing a global role 403;
- no answer holds any of ``default``'s identifiers but those the caller typed in the URL (an
  empty list, a count without them);
- nothing in the database changes (but the walker's own audit entries: repairing the logs of
  their own team, which has none pending, is still an action the trail keeps).

A new route is walked without editing this file.
"""

from __future__ import annotations

import difflib
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from scheduler_core.db.tables import executions, reach_queue
from tests.helpers.journal import db_now, execution_row, insert_rows, journal_pending
from tests.webapp.api_support import queued_row, snapshot
from tests.webapp.conftest import Auth, csrf_token
from webapp.api import OPERATIONS
from webapp.auth import PUBLIC_ENDPOINTS
from webapp.node import accounts_of, audit_of, reach_of, scheduler_of

THEIRS = TaskDefinition(id="ledger-7c1e", name="Ledger 7c1e", cron="0 2 * * *", handler={"kind": "hook"})
OURS = TaskDefinition(id="ops-job", name="Ops job", cron="0 3 * * *", team="ops", handler={"kind": "hook"})
OBJECT_ARGUMENTS = ("task_id", "occurrence_id", "log_id", "queue_id", "name")  # a URL argument naming a team's object
NOWHERE = "nothing-by-this-id"  # an object that does not exist: what another team's must look like
NO_QUEUE_ID = "00000000-0000-4000-8000-000000000000"  # a queue id is a UUID: one that names nothing
RULE = {"name": "walk-default-rule", "events": ["execution.failed"], "template": "walk-alert",
        "to": "default-oncall@example.com", "team": "default"}
CSRF_VALUE = re.compile(r'name="csrf[-_]token"[^>]*?(?:content|value)="[^"]*"')  # signed with the time
SKIPPED = {"static": "files", "auth.logout": "ends the walker's own session", "auth.login": "public",
           "oidc.login": "public", "oidc.callback": "public"}


@dataclass
class World:
    app: Flask
    browser: FlaskClient
    token: dict[str, str]
    values: dict[str, str]  # URL arguments: default's objects
    secrets: tuple[str, ...]  # default's identifiers: none may appear in an answer


@pytest.fixture
def world(db_app: Flask) -> Iterator[World]:
    app, engine = db_app, db_app.extensions["hai_engine"]
    accounts = accounts_of(app)
    accounts.create_team("ops", "Operations")
    scheduler = scheduler_of(app)
    scheduler.set_hooks({"on_task_execute": lambda event: "done"})
    scheduler.register(THEIRS)
    scheduler.register(OURS)
    ran = scheduler.trigger(THEIRS.id)
    scheduler.trigger(OURS.id)
    unknown = str(uuid.uuid4())
    insert_rows(engine, executions, [execution_row(unknown, db_now(engine), "unknown", THEIRS.id)])
    [pending] = journal_pending(engine, 1, prefix=f"p-{uuid.uuid4().hex[:8]}")
    with engine.begin() as conn:
        conn.execute(executions.update().where(executions.c.occurrence_id == pending).values(task_id=THEIRS.id))
    audit_of(app).record("admin", "task.trigger", THEIRS.id, after={"occurrence_id": ran.occurrence_id})
    audit_of(app).record("admin", "execution.resolve_unknown", unknown, after={"status": "discarded"})
    audit_of(app).record("admin", "user.role", "outsider", after={"role": "walk-secret-user-change"})
    reach = reach_of(app)
    reach.templates.create("walk-alert", "log", "{summary}")
    reach.alerts.save_rule(RULE)
    dead, undelivered = queued_row(engine, "dead", team="default"), queued_row(engine, "unknown", team="default")
    alert, unowned = queued_row(engine, "pending", team="default"), queued_row(engine, "dead")
    with engine.begin() as conn:
        conn.execute(reach_queue.update().where(reach_queue.c.queue_id == alert).values(alert_rule=RULE["name"]))
    accounts.create("outsider", "viewer", generate_password_hash("outsider-password-1"))
    user = accounts.set_role("outsider", None, accounts.get("outsider").updated_at)
    accounts.set_grants("outsider", {"ops": "admin"}, user.updated_at)
    browser = app.test_client()
    assert Auth(browser).login("outsider", "outsider-password-1").status_code == 302
    token = {"Authorization": f"Bearer {app.extensions['hai_api_tokens'].create('outsider', 'walk').secret}"}
    values = {"task_id": THEIRS.id, "occurrence_id": unknown, "log_id": ran.id, "name": RULE["name"],
              "pending": pending, "queue_id": dead, "undelivered": undelivered, "token_id": str(uuid.uuid4())}
    yield World(app, browser, token, values,
                (THEIRS.id, ran.occurrence_id, ran.id, unknown, pending, "walk-secret-user-change", dead, undelivered,
                 alert, unowned, RULE["name"], RULE["to"]))


def _values_for(world: World, endpoint: str) -> dict[str, str]:
    """The URL arguments for ``endpoint``: a log repair names the run whose log is pending (it
    would change something if the team check were missing; the unknown run has no log to repair);
    resolving a delivery names the unknown one, the rest the dead letter."""
    if endpoint in ("logs.repair", "api.repair_log"):
        return {**world.values, "occurrence_id": world.values["pending"]}
    if endpoint in ("notifications.resolve", "api.resolve_delivery"):
        return {**world.values, "queue_id": world.values["undelivered"]}
    return world.values


def _form(world: World, endpoint: str) -> dict[str, Any]:
    """What a page's form posts besides its token, where an empty form is refused before any row is
    read: the version of ``default``'s message, so that only the team check can stop the post."""
    queue = reach_of(world.app).queue
    if endpoint == "notifications.requeue":
        return {"expected_updated_at": getattr(queue.get(world.values["queue_id"]), "updated_at", 0)}
    if endpoint == "notifications.resolve":
        return {"status": "discarded", "reason": "checked",
                "expected_updated_at": getattr(queue.get(world.values["undelivered"]), "updated_at", 0)}
    return {}


def _nowhere(name: str) -> str:
    return NO_QUEUE_ID if name == "queue_id" else NOWHERE


def _leaks(world: World, body: str, typed: str) -> list[str]:
    return [secret for secret in world.secrets if secret in body and secret not in typed]


def _state(world: World) -> dict[str, list[tuple[Any, ...]]]:
    rows = snapshot(world.app)
    rows["audit_log"] = [row for row in rows.get("audit_log", []) if "outsider" not in row]
    return rows


def _check(world: World, what: str, send: Any, absent: int | None, globally: bool, typed: str = "") -> list[str]:
    """``absent``: the status the same call answers for objects that do not exist (None: it names none)."""
    before = _state(world)
    response = send()
    body = response.get_data(as_text=True)
    problems = []
    if globally and response.status_code != 403:
        problems.append(f"{what}: {response.status_code}, not 403 (a global role is needed)")
    if not globally and absent is not None:
        if response.status_code != absent:
            problems.append(f"{what}: {response.status_code}, not {absent} (as for an object that does not exist)")
        if absent not in (303, 400, 404):  # 400: the form, read first
            problems.append(f"{what}: an object that does not exist answers {absent}, not 404, 400 or a redirect")
    if response.status_code >= 500:
        problems.append(f"{what}: {response.status_code}")
    leaked = _leaks(world, body, typed)
    if leaked:
        problems.append(f"{what}: the answer shows {leaked}")
    if _state(world) != before:
        problems.append(f"{what}: changed the database")
    return problems


def test_every_route_answers_a_member_of_another_team_as_if_nothing_were_there(world: World) -> None:
    app, problems, walked = world.app, [], 0
    with app.test_request_context():
        rules = [rule for rule in app.url_map.iter_rules() if not rule.endpoint.startswith("api.")]
    for rule in rules:
        if rule.endpoint in SKIPPED or rule.endpoint in PUBLIC_ENDPOINTS:
            continue
        view = app.view_functions[rule.endpoint]
        named = any(name in OBJECT_ARGUMENTS for name in rule.arguments)
        with app.test_request_context():
            values = _values_for(world, rule.endpoint)
            path = rule.build({name: values.get(name, "walk") for name in rule.arguments},
                              append_unknown=False)[1]
            nowhere = rule.build({name: (_nowhere(name) if name in OBJECT_ARGUMENTS else values.get(name, "walk"))
                                  for name in rule.arguments}, append_unknown=False)[1]
        globally = bool(getattr(view, "required_globally", False))
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            walked += 1

            def send(target: str, method: str = method, endpoint: str = rule.endpoint) -> Any:
                data = {"csrf_token": csrf_token(world.browser, "/"), **_form(world, endpoint)} \
                    if method != "GET" else None
                return world.browser.open(target, method=method, data=data)

            absent = send(nowhere).status_code if named else None
            problems += _check(world, f"{method} {path} ({rule.endpoint})", lambda path=path: send(path), absent,
                               globally, path)
            if method == "GET" and not named:  # an htmx request (a fragment) shows as little
                problems += _check(world, f"htmx GET {path}", lambda path=path: world.browser.get(
                    path, headers={"HX-Request": "true"}), None, globally)
    assert walked > 40, f"the walk found only {walked} routes"
    assert not problems, "\n".join(problems)


def test_every_api_operation_answers_a_member_of_another_team_as_if_nothing_were_there(world: World) -> None:
    scheduler = scheduler_of(world.app)
    theirs = scheduler.task_ops.get(THEIRS.id)
    unknown = scheduler.execution.get(world.values["occurrence_id"])
    now = scheduler.task_ops.now_ms()
    queue = reach_of(world.app).queue
    dead, undelivered = queue.get(world.values["queue_id"]), queue.get(world.values["undelivered"])
    assert dead is not None and undelivered is not None
    bodies: dict[str, Any] = {
        "create_task": {"id": "sneak-1", "name": "Sneak", "cron": "*/5 * * * *", "handler": {"kind": "hook"},
                        "team": "default"},
        "update_task": {"expected_updated_at": theirs.updated_at, "description": "edited"},
        "delete_task": {"expected_updated_at": theirs.updated_at},
        "pause_task": {"reason": "maintenance window", "minutes": 30},
        "trigger_task": {},
        "backfill_task": {"start_ms": now - 3 * 3_600_000, "end_ms": now - 3_600_000, "reason": "outage"},
        "resolve_execution": {"status": "discarded", "reason": "checked", "expected_updated_at": unknown.updated_at},
        "requeue_dead": {"expected_updated_at": dead.updated_at},
        "resolve_delivery": {"status": "discarded", "reason": "checked", "expected_updated_at": undelivered.updated_at},
    }
    client, problems = world.app.test_client(), []
    for op in OPERATIONS:
        path = "/api/v1" + op.rule
        for name in op.path_types:
            value = _values_for(world, f"api.{op.endpoint}")[name]
            path = path.replace(f"<path:{name}>", value).replace(f"<{name}>", value)
        if op.method == "GET":
            path += "?limit=100" if op.query is not None and "limit" in op.query.model_fields else ""
        named = any(name in OBJECT_ARGUMENTS for name in op.path_types)
        body = bodies.get(op.endpoint, {} if op.body is not None else None)

        def send(op: Any = op, path: str = path, body: Any = body) -> Any:
            return client.open(path, method=op.method, headers=world.token, json=body)

        found = _check(world, f"{op.method} {path} ({op.endpoint})", send, 404 if named else None, False, path)
        if op.endpoint == "create_task":  # names another team: refused naming the field, like any bad value
            answer = send()
            if (answer.status_code, (answer.get_json() or {}).get("field")) != (422, "team"):
                found.append(f"create_task in default: {answer.status_code} {answer.get_json()}")
        problems += found
    assert not problems, "\n".join(problems)


def _more_of_theirs(world: World) -> None:
    """More of ``default``'s history: a task, an unknown run, a pending log, a run holding a lease,
    a dead letter, an unknown delivery and an alert."""
    engine = world.app.extensions["hai_engine"]
    scheduler_of(world.app).register(TaskDefinition(id="ledger-more", name="More", cron="0 4 * * *"))
    now = db_now(engine)
    running = {**execution_row(str(uuid.uuid4()), now, "running", THEIRS.id), "owner_node": "ghost-node",
               "lease_until": now + 3_600_000, "execution_token": str(uuid.uuid4())}
    insert_rows(engine, executions, [execution_row(str(uuid.uuid4()), now, "unknown", THEIRS.id), running,
                                     execution_row(str(uuid.uuid4()), now, "failed", THEIRS.id, "pending")])
    queued_row(engine, "dead", team="default")
    queued_row(engine, "unknown", team="default")
    alert = queued_row(engine, "dead", team="default")
    with engine.begin() as conn:
        conn.execute(reach_queue.update().where(reach_queue.c.queue_id == alert).values(alert_rule=RULE["name"]))


def _page(world: World, path: str) -> str:
    """``path`` as htmx asks for it, its CSRF tokens (signed with the time) left out."""
    text = world.browser.get(path, headers={"HX-Request": "true"}).get_data(as_text=True)
    return CSRF_VALUE.sub("csrf", text)


def test_what_a_member_counts_does_not_move_with_another_teams_history(world: World) -> None:
    """Counts hold no identifier: a fragment that counted another team's rows would pass the walk.
    So each counting fragment is read, ``default`` gains history, and it must read the same."""
    fragments = ("/overview/counters", "/overview/chart", "/executions/running", "/logs/failures",
                 "/executions/unknown", "/nodes/", "/notifications/counts", "/notifications/dead",
                 "/notifications/unknown", "/notifications/alerts/", "/notifications/dead/bulk")
    before = {path: _page(world, path) for path in fragments}
    api = {path: world.app.test_client().get(path, headers=world.token).get_json()
           for path in ("/api/v1/nodes", "/api/v1/logs/failures", "/api/v1/notifications/dead",
                        "/api/v1/notifications/unknown")}
    _more_of_theirs(world)
    for path in fragments:
        after = _page(world, path)
        assert after == before[path], (path, [line for line in difflib.unified_diff(
            before[path].splitlines(), after.splitlines(), lineterm="", n=0)][:20])
    for path, answer in api.items():
        now = world.app.test_client().get(path, headers=world.token).get_json()
        assert {k: v for k, v in now.items() if k != "now_ms"} == {k: v for k, v in answer.items() if k != "now_ms"}
    scheduler = scheduler_of(world.app)  # the rows are there: a global caller counts them
    assert any(e.task_id == THEIRS.id for e in scheduler.execution.leases())


def test_a_scrape_with_a_members_token_shows_nothing_of_another_team(world: World) -> None:
    """``/metrics`` is public to the walk above (its own token or address): read with the walker's
    personal API token it is a team's scrape, with ``default``'s identifiers nowhere."""
    client = world.app.test_client()
    problems = _check(world, "GET /metrics (a member's token)", lambda: client.get("/metrics", headers=world.token),
                      None, False)
    body = client.get("/metrics", headers=world.token).get_data(as_text=True)
    assert not problems, "\n".join(problems)
    assert OURS.id in body and 'team="ops"' in body and 'team="default"' not in body
