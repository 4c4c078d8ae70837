"""The Teams page (global admins only, docs/teams.md), on SQLite, PostgreSQL and MariaDB.

A global admin creates, renames and deletes a team through the page: the database holds each
change and the audit trail has an entry for it. What the core refuses (an id that is not one, an
empty display name, an id taken, ``default``, a team that still has a task) answers 400 with the
message next to its field and changes nothing; a team that is not there answers 404. An admin of
a team without a global role gets 403 on every route and no Teams link in the navigation.
"""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from tests.webapp.conftest import Auth, csrf_token
from tests.webapp.test_team_tasks import _member
from webapp.node import accounts_of, audit_of, scheduler_of

ACTIONS = ("team.create", "team.rename", "team.delete")


def _admin(app: Flask) -> FlaskClient:
    client = app.test_client()
    assert Auth(client).login().status_code == 302
    return client


def _post(client: FlaskClient, path: str, headers: dict[str, str] | None = None, **form: str) -> Any:
    return client.post(path, data={**form, "csrf_token": csrf_token(client, "/")}, headers=headers or {})


def _teams(app: Flask) -> dict[str, tuple[str, int]]:
    return {team.id: (team.name, team.updated_at) for team in accounts_of(app).team_list()}


def _entries(app: Flask) -> dict[str, list[Any]]:
    return {action: audit_of(app).list(None, action, 10, 0) for action in ACTIONS}


def _field_error(page: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}-error">([^<]*)<', page)
    assert match, f"no message element {element_id}-error"
    return html.unescape(match.group(1))


def test_a_global_admin_creates_renames_and_deletes_a_team(db_app: Flask) -> None:
    admin = _admin(db_app)
    page = admin.get("/teams/")
    assert page.status_code == 200 and 'action="/teams/new"' in page.get_data(as_text=True)

    created = _post(admin, "/teams/new", team="ops", name="Operations")
    assert created.status_code == 303 and created.headers["Location"].endswith("/teams/")
    assert _teams(db_app)["ops"][0] == "Operations"
    listed = admin.get("/teams/").get_data(as_text=True)
    assert "Team ops created (Operations)." in listed
    assert 'action="/teams/rename/ops"' in listed and 'action="/teams/delete/ops"' in listed
    assert 'action="/teams/delete/default"' not in listed  # default stays: no delete button

    renamed = _post(admin, "/teams/rename/ops", name="Ops people")
    assert renamed.status_code == 303 and _teams(db_app)["ops"][0] == "Ops people"

    accounts = accounts_of(db_app)
    accounts.create("olga", "viewer", generate_password_hash("olga-password-1"))
    accounts.set_grants("olga", {"ops": "operator"}, accounts.get("olga").updated_at)
    deleted = _post(admin, "/teams/delete/ops", name="")
    assert deleted.status_code == 303 and "ops" not in _teams(db_app)
    assert accounts.grants("olga") == {}
    assert "Team ops deleted: 1 role granted in it removed." in admin.get("/teams/").get_data(as_text=True)

    entries = _entries(db_app)
    [create], [rename], [delete] = entries["team.create"], entries["team.rename"], entries["team.delete"]
    assert (create.actor, create.target, create.after) == ("admin", "ops", {"id": "ops", "name": "Operations"})
    assert (rename.target, rename.before, rename.after) == ("ops", {"name": "Operations"}, {"name": "Ops people"})
    assert (delete.target, delete.before, delete.after) == ("ops", {"id": "ops", "name": "Ops people"},
                                                            {"roles_removed": 1})


@pytest.fixture
def teams_app(db_app: Flask) -> Flask:
    """Teams ``ops`` (no task) and ``x`` (holding task ``t1``)."""
    accounts_of(db_app).create_team("ops", "Operations")
    accounts_of(db_app).create_team("x", "Team x")
    scheduler_of(db_app).register(TaskDefinition(id="t1", name="T", cron="0 2 * * *", team="x"))
    return db_app


REFUSED = [  # path, form, the message element's id, what its message says
    ("/teams/new", {"team": "Bad Id", "name": "Bad"}, "new-team", "Must be a team id"),
    ("/teams/new", {"team": "new-one", "name": "   "}, "new-name", "Must be a non-empty string"),
    ("/teams/new", {"team": "ops", "name": "Again"}, "new-team", "exists already"),
    ("/teams/rename/ops", {"name": ""}, "team-ops-name", "Must be a non-empty string"),
    ("/teams/rename/ops", {"name": "two\nlines"}, "team-ops-name", "Must be a single line"),
    ("/teams/delete/default", {}, "team-default-team", "stays"),
    ("/teams/delete/x", {}, "team-x-team", "still has 1 task(s)"),
]


@pytest.mark.parametrize(("path", "form", "element", "message"), REFUSED, ids=[r[2] + ":" + r[3] for r in REFUSED])
def test_what_the_core_refuses_answers_400_with_its_message_and_changes_nothing(
        teams_app: Flask, path: str, form: dict[str, str], element: str, message: str) -> None:
    admin = _admin(teams_app)
    before, tasks = _teams(teams_app), [task.id for task in scheduler_of(teams_app).refresh_tasks()]
    response = _post(admin, path, **form)
    page = response.get_data(as_text=True)
    assert response.status_code == 400, page[:500]
    assert message in _field_error(page, element)
    if "/delete/" not in path:  # the field is marked invalid and described by its message
        assert f'aria-invalid="true" aria-describedby="{element}-error"' in page
    assert "Nothing was changed" in page
    if path == "/teams/new":  # the create form shows what was typed
        assert f'value="{html.escape(form["team"])}"' in page
    assert _teams(teams_app) == before
    assert [task.id for task in scheduler_of(teams_app).refresh_tasks()] == tasks
    assert _entries(teams_app) == {action: [] for action in ACTIONS}
    # htmx swaps no 4xx: the same refusal answers 200 to it, the message in it.
    swapped = _post(admin, path, headers={"HX-Request": "true"}, **form)
    assert swapped.status_code == 200 and message in _field_error(swapped.get_data(as_text=True), element)
    assert _teams(teams_app) == before


def test_renaming_or_deleting_a_team_that_is_not_there_answers_404(teams_app: Flask) -> None:
    admin = _admin(teams_app)
    before = _teams(teams_app)
    for path, form in (("/teams/rename/nope", {"name": "Nope"}), ("/teams/delete/nope", {}),
                       ("/teams/rename/Bad%20Id", {"name": "Nope"}), ("/teams/delete/Bad%20Id", {})):
        assert _post(admin, path, **form).status_code == 404, path
    assert _teams(teams_app) == before and _entries(teams_app) == {action: [] for action in ACTIONS}


def test_a_teams_admin_without_a_global_role_is_refused_every_teams_route(teams_app: Flask) -> None:
    assert 'href="/teams/">Teams</a>' in _admin(teams_app).get("/").get_data(as_text=True)
    member = _member(teams_app, "tina", {"default": "admin", "ops": "admin"})
    before = _teams(teams_app)
    assert member.get("/teams/").status_code == 403
    for path, form in (("/teams/new", {"team": "mine", "name": "Mine"}), ("/teams/rename/ops", {"name": "Taken"}),
                       ("/teams/delete/ops", {})):
        assert _post(member, path, **form).status_code == 403, path
    assert _teams(teams_app) == before and _entries(teams_app) == {action: [] for action in ACTIONS}
    for page in ("/", "/tasks/"):
        assert 'href="/teams/"' not in member.get(page).get_data(as_text=True), page
