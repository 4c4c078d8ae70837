"""What the JSON API tests share: a token per role, rows for every operation to act on, and a
snapshot of the database to prove that a refused call changed nothing."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import MetaData, select, update
from sqlalchemy.engine import Engine
from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from scheduler_core.db.tables import executions, reach_queue
from scheduler_core.runtime.accounts import ROLES
from scheduler_core.store.reach_queue import QueueRepository
from tests.helpers.journal import db_now, execution_row, insert_rows, journal_pending
from webapp.node import accounts_of, scheduler_of

PROBLEM = "application/problem+json"
WALK = TaskDefinition(id="walk", name="Walk", cron="0 2 * * *", handler={"kind": "hook"})
# Every authenticated call writes its token's last_used_at and rate window: not a change it made.
NOT_COMPARED = {"api_tokens"}


@dataclass
class Api:
    """The app, a client without cookies, and a token per role (users viewer1, operator1, admin)."""

    app: Flask
    client: FlaskClient
    tokens: dict[str, str]

    def call(self, method: str, path: str, role: str | None = "admin", body: Any = None, raw: bytes | None = None,
             headers: dict[str, str] | None = None) -> Any:
        sent = dict(headers or {})
        if role is not None:
            sent["Authorization"] = f"Bearer {self.tokens[role]}"
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        return self.client.open(path, method=method, data=data, headers=sent,
                                content_type="application/json" if data is not None else None)

    @property
    def engine(self) -> Any:
        return self.app.extensions["hai_engine"]


def make_api(app: Flask) -> Api:
    tokens = {}
    for role in ROLES:
        name = "admin" if role == "admin" else f"{role}1"
        if role != "admin":
            accounts_of(app).create(name, role, generate_password_hash(f"{role}-password-1"))
        tokens[role] = app.extensions["hai_api_tokens"].create(name, f"{role}-token").secret
    scheduler = scheduler_of(app)
    scheduler.set_hooks({"on_task_execute": lambda event: "ok"})
    scheduler.register(WALK)
    return Api(app, app.test_client(), tokens)


def unknown_execution(api: Api, task_id: str = "walk") -> Any:
    """An execution of ``task_id`` journaled unknown (as an expiry scan leaves one)."""
    occurrence = str(uuid.uuid4())
    insert_rows(api.engine, executions, [execution_row(occurrence, db_now(api.engine), "unknown", task_id)])
    return scheduler_of(api.app).execution.get(occurrence)


def pending_log(api: Api) -> str:
    [occurrence] = journal_pending(api.engine, 1, prefix=f"p-{uuid.uuid4().hex[:8]}")
    return occurrence


def queued_row(engine: Engine, status: str, queue_id: str | None = None, team: str | None = None) -> str:
    """A queued message left in ``status`` (dead, unknown), as delivery rounds leave them, about
    ``team`` (None: no one team's, as a message the application sends); its queue id."""
    queue_id = queue_id or str(uuid.uuid4())
    QueueRepository(engine, "test", 60_000).enqueue(
        queue_id, "log", None, "someone@example.com", "Subject", "secret body text", {}, (3, 1_000, 4_000), None)
    with engine.begin() as conn:
        conn.execute(update(reach_queue).where(reach_queue.c.queue_id == queue_id).values(
            status=status, last_failure="permanent_rejection" if status == "dead" else "timeout", team=team))
    return queue_id


def delivery(api: Api, status: str, team: str | None = None) -> Any:
    """A queued message left in ``status`` (dead, unknown), read back through ``reach.queue``."""
    return api.app.extensions["hai_reach"].queue.get(queued_row(api.engine, status, team=team))


_reflected: dict[tuple[int, str], MetaData] = {}


def snapshot(app: Flask) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table but NOT_COMPARED (reflected once per engine, so a new table is included)."""
    # A write accepted just before may have started a run on the dashboard's own thread (a trigger
    # is a submit): its journal rows land later, so wait for it, or they are blamed on the next call.
    assert app.extensions["hai_scheduler"].context().wait_idle(60), "a run started by an earlier call did not end"
    engine = app.extensions["hai_engine"]
    key = (id(engine), str(engine.url))
    tables = _reflected.get(key)
    if tables is None:
        tables = _reflected[key] = MetaData()
        tables.reflect(engine)
    with engine.connect() as conn:
        rows = {name: sorted((tuple(row) for row in conn.execute(select(table))), key=repr)
                for name, table in tables.tables.items() if name not in NOT_COMPARED}
        conn.rollback()
    return rows


def assert_problem(response: Any, status: int, code: str | None = None, field: str | None = None) -> dict[str, Any]:
    """``response`` is RFC 9457 problem details with ``status`` (and ``code`` / ``field`` when given)."""
    assert response.status_code == status, (response.status_code, response.get_data(as_text=True)[:500])
    assert response.mimetype == PROBLEM, response.mimetype
    problem: dict[str, Any] = response.get_json()
    assert {"type", "title", "status", "detail", "code", "field"} <= set(problem), problem
    assert problem["status"] == status and problem["detail"] and problem["code"].startswith("hai:")
    if code is not None:
        assert problem["code"] == code, problem
    if field is not None:
        assert problem["field"] == field, problem
    return problem
