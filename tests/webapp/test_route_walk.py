"""Every route that changes something, walked from ``app.url_map``, refuses and changes nothing:

(a) a signed-in user with the role it needs but without a CSRF token: 400 (the CSRF page);
(b) a signed-in user with a role below it, with a valid token: 403;
(c) an anonymous caller with a valid token: sent to the login page (401 and HX-Redirect to htmx).

"Changes nothing": every table of the database (users, audit trail, tasks, executions, the
notification queue and templates, ...) holds exactly the same rows before and after.

The role a route needs comes from the route itself (``require_role`` keeps it on the view), so
a new route is walked without editing this file, and a changing route that names no role fails
here unless NO_ROLE names it with the reason.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import MetaData, select
from werkzeug.routing import Rule
from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from scheduler_core.runtime.accounts import ROLES
from tests.webapp.conftest import Auth, csrf_token
from webapp.auth import PUBLIC_ENDPOINTS, required_role
from webapp.node import accounts_of, scheduler_of

CHANGING = {"POST", "PUT", "PATCH", "DELETE"}
NO_ROLE = {
    "auth.login": "signing in is what an anonymous visitor does: there is no user, so no role, yet",
    "auth.logout": "every signed-in user may end their own session, whatever their role",
}
CSRF_PAGE = "This form expired or was not sent from this dashboard"
# The JSON API takes no cookie and no CSRF token (bearer tokens only), so (a)-(c) do not apply:
# tests/webapp/test_api_walk.py walks every API operation the same way with tokens instead.
API_PREFIX = "api."


@dataclass(frozen=True)
class Route:
    rule: Rule
    method: str
    path: str
    role: str | None  # None: only for NO_ROLE endpoints

    def __str__(self) -> str:
        return f"{self.method} {self.rule.rule} ({self.rule.endpoint})"


@dataclass
class World:
    """The app with rows the routes' arguments name, and a signed-in client per role."""

    app: Flask
    values: dict[str, str]  # the routes' URL arguments
    clients: dict[str, FlaskClient]
    anonymous: FlaskClient

    def tokens(self, client: FlaskClient) -> str:
        return csrf_token(client, "/login" if client is self.anonymous else "/")


def _arguments(app: Flask) -> dict[str, str]:
    """Values for the routes' URL arguments that name real rows (any other argument gets a
    placeholder: the guards answer before a view reads it)."""
    scheduler = scheduler_of(app)
    scheduler.set_hooks({"on_task_execute": lambda event: "ok"})
    scheduler.register(TaskDefinition(id="walk", name="Walk", cron="0 2 * * *"))
    occurrence = scheduler.trigger("walk").occurrence_id
    accounts_of(app).create("walk", "viewer", generate_password_hash("walk-password-1"))
    return {"task_id": "walk", "occurrence_id": occurrence, "name": "walk", "queue_id": str(uuid.uuid4())}


@pytest.fixture
def world(app: Flask) -> Iterator[World]:
    clients = {}
    for role in ROLES:
        client = app.test_client()
        if role != "admin":
            accounts_of(app).create(f"{role}1", role, generate_password_hash(f"{role}-password-1"))
        name, password = ("admin", None) if role == "admin" else (f"{role}1", f"{role}-password-1")
        response = Auth(client).login(name, password) if password else Auth(client).login()
        assert response.status_code == 302, role
        clients[role] = client
    yield World(app, _arguments(app), clients, app.test_client())


def _changing_routes(app: Flask, values: dict[str, str]) -> list[Route]:
    routes = []
    with app.test_request_context():
        for rule in app.url_map.iter_rules():
            if rule.endpoint.startswith(API_PREFIX):
                continue
            view = app.view_functions[rule.endpoint]
            path = rule.build({name: values.get(name, "walk") for name in rule.arguments}, append_unknown=False)
            assert path is not None, rule.rule
            routes += [Route(rule, method, path[1], required_role(view)) for method in sorted(rule.methods or ())
                       if method in CHANGING]
    return routes


def _snapshot(app: Flask) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table in the database (reflected, so a new table is included)."""
    engine = app.extensions["hai_engine"]
    tables = MetaData()
    tables.reflect(engine)
    with engine.connect() as conn:
        rows = {name: sorted((tuple(row) for row in conn.execute(select(table))), key=repr)
                for name, table in tables.tables.items()}
        conn.rollback()
    return rows


def _changed(before: dict[str, list[tuple[Any, ...]]], after: dict[str, list[tuple[Any, ...]]]) -> list[str]:
    return [f"{name}: {len(before.get(name, []))} -> {len(after.get(name, []))} rows"
            for name in sorted(set(before) | set(after)) if before.get(name) != after.get(name)]


def _send(client: FlaskClient, route: Route, token: str | None, **headers: str) -> Any:
    data = {"csrf_token": token} if token is not None else {}
    return client.open(route.path, method=route.method, data=data, headers=headers)


def _walk(world: World, check: Any) -> None:
    """Run ``check(route) -> problem or None`` on every changing route; fail with every problem
    found, and with any route that changed a row."""
    routes = _changing_routes(world.app, world.values)
    assert {r.role for r in routes} >= {"operator", "admin"}, "the walk found too few routes"
    problems = []
    for route in routes:
        before = _snapshot(world.app)
        problem = check(route)
        changed = _changed(before, _snapshot(world.app))
        if problem:
            problems.append(f"{route}: {problem}")
        if changed:
            problems.append(f"{route} changed {', '.join(changed)}")
    assert not problems, "\n".join(problems)


def test_every_changing_route_names_the_role_it_needs(app: Flask) -> None:
    routes = _changing_routes(app, {})
    unnamed = sorted(str(r) for r in routes if r.role is None and r.rule.endpoint not in NO_ROLE)
    assert not unnamed, f"changing routes without require_role: {unnamed}"
    assert all(r.role in ROLES for r in routes if r.role is not None)
    public = {r.rule.endpoint for r in routes if r.rule.endpoint in PUBLIC_ENDPOINTS}
    assert public <= set(NO_ROLE), f"public changing routes not named in NO_ROLE: {sorted(public - set(NO_ROLE))}"
    named_but_guarded = sorted(str(r) for r in routes if r.rule.endpoint in NO_ROLE and r.role is not None)
    assert not named_but_guarded, f"NO_ROLE names routes that have a role now: {named_but_guarded}"


def test_a_post_without_a_csrf_token_is_refused(world: World) -> None:
    def check(route: Route) -> str | None:
        # The role the route needs (any role for logout); signing in is done anonymously.
        public = route.rule.endpoint in PUBLIC_ENDPOINTS
        client = world.anonymous if public else world.clients[route.role or ROLES[0]]
        response = _send(client, route, None)
        if response.status_code != 400 or CSRF_PAGE not in response.get_data(as_text=True):
            return f"without a CSRF token: {response.status_code}, not the CSRF refusal"
        return None

    _walk(world, check)


def test_a_role_below_the_route_is_refused(world: World) -> None:
    def check(route: Route) -> str | None:
        if route.role is None:  # no role is below it; but only NO_ROLE may name none
            return None if route.rule.endpoint in NO_ROLE else "names no role (require_role)"
        for below in ROLES[:ROLES.index(route.role)]:
            client = world.clients[below]
            response = _send(client, route, world.tokens(client))
            if response.status_code != 403:
                return f"{below} (needs {route.role}): {response.status_code}, not 403"
        return None

    _walk(world, check)


def test_anonymous_callers_are_sent_to_the_login_page(world: World) -> None:
    def check(route: Route) -> str | None:
        if route.rule.endpoint in PUBLIC_ENDPOINTS:
            return None  # named in NO_ROLE (see the first test): signing in is public
        token = world.tokens(world.anonymous)
        page = _send(world.anonymous, route, token)
        if page.status_code != 302 or not page.headers.get("Location", "").startswith("/login"):
            return f"anonymous: {page.status_code} {page.headers.get('Location')}, not a redirect to /login"
        htmx = _send(world.anonymous, route, token, **{"HX-Request": "true"})
        if htmx.status_code != 401 or htmx.headers.get("HX-Redirect") != "/login":
            return f"anonymous htmx: {htmx.status_code} {htmx.headers.get('HX-Redirect')}, not 401 to /login"
        return None

    _walk(world, check)
