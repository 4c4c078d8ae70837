"""The role each guarded page needs, written down once (README: edit tasks, templates and users:
admin; trigger, rerun, resolve, repair, requeue: operator; everything else: any signed-in user).

The route walk (test_route_walk.py) proves that every changing route refuses the roles below
the one its view names; it reads that role from the view, so it cannot see a guard lowered from
``admin`` to ``operator``. This table can; and the guarded GET pages (forms and confirmations,
which the walk does not send) are requested here with the role just below, and the role itself.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from scheduler_core.runtime.accounts import ROLES
from tests.webapp.conftest import Auth, csrf_token
from webapp.auth import required_role
from webapp.node import accounts_of, scheduler_of

OPERATOR = ("executions.resolve", "executions.bulk_resolve", "logs.repair", "logs.repair_all", "notifications.requeue",
            "notifications.bulk_requeue", "notifications.resolve", "tasks.trigger", "tasks.rerun", "tasks.pause",
            "tasks.resume", "backfill.form", "backfill.submit")
ADMIN = ("notifications.new_template", "notifications.create_template", "notifications.edit_template",
         "notifications.update_template", "notifications.delete_template", "tasks.new", "tasks.create", "tasks.edit",
         "tasks.update", "tasks.enable", "tasks.disable", "tasks.confirm_delete", "tasks.delete", "users.index",
         "users.new", "users.create", "users.manage", "users.set_role", "users.disable", "users.enable",
         "users.reset_password", "users.set_team_role", "alerts.new_rule", "alerts.create_rule", "alerts.edit_rule",
         "alerts.update_rule",
         "alerts.delete_rule", "alerts.test_rule", "teams.index", "teams.create", "teams.rename", "teams.delete")
# The JSON API (/api/v1, bearer tokens): reads need a token of any role, so "viewer" is named.
API_VIEWER = ("api.list_tasks", "api.get_task", "api.describe_task", "api.list_executions", "api.get_execution",
              "api.list_logs", "api.list_log_failures", "api.list_dead", "api.list_unknown_deliveries",
              "api.list_nodes", "api.health")
API_OPERATOR = ("api.pause_task", "api.resume_task", "api.trigger_task", "api.backfill_task",
                "api.resolve_execution", "api.repair_log", "api.repair_all_logs", "api.requeue_dead",
                "api.resolve_delivery")
API_ADMIN = ("api.create_task", "api.update_task", "api.delete_task", "user_tokens.create", "user_tokens.revoke",
             "user_tokens.created")
# Everyone's, not one team's: these need the role globally (a team's admin is refused). Alert
# rules are a team's (its admin makes them; a global rule is checked where it is found).
GLOBAL = tuple(e for e in ADMIN + API_ADMIN if e.split(".")[0] in ("users", "user_tokens", "notifications",
                                                                   "teams"))
NEEDED = {**dict.fromkeys(OPERATOR + API_OPERATOR, "operator"), **dict.fromkeys(ADMIN + API_ADMIN, "admin"),
          **dict.fromkeys(API_VIEWER, "viewer")}

# Guarded pages that show a form or a confirmation (GET), with the path to ask for.
GUARDED_PAGES = {
    "tasks.new": "/tasks/new", "tasks.edit": "/tasks/edit/roles", "tasks.confirm_delete": "/tasks/delete/roles",
    "notifications.new_template": "/notifications/templates/new", "users.index": "/users/",
    "users.new": "/users/new", "users.manage": "/users/manage/viewer1",
    "alerts.new_rule": "/notifications/alerts/rules/new", "backfill.form": "/tasks/backfill/roles",
    "teams.index": "/teams/",
}


def test_every_endpoint_needs_exactly_the_role_written_here(app: Flask) -> None:
    roles = {endpoint: required_role(view) for endpoint, view in app.view_functions.items()}
    assert set(NEEDED) <= set(roles), f"endpoints gone: {sorted(set(NEEDED) - set(roles))}"
    wrong = {endpoint: (role, NEEDED.get(endpoint)) for endpoint, role in roles.items()
             if role != NEEDED.get(endpoint)}
    assert not wrong, f"endpoint: (role it needs, role written here): {wrong}"
    globally = {endpoint for endpoint, view in app.view_functions.items() if getattr(view, "required_globally", False)}
    assert globally == set(GLOBAL), (sorted(globally - set(GLOBAL)), sorted(set(GLOBAL) - globally))


def test_a_teams_admin_edits_tasks_but_not_what_every_team_shares(app: Flask) -> None:
    """Admin of ``default`` by a team grant, no global role: the task and alert rule forms open;
    users, teams and notification templates answer 403, and the navigation has no Users or Teams link."""
    accounts = accounts_of(app)
    accounts.create("teamadmin", "viewer", generate_password_hash("team-admin-password"))
    user = accounts.set_role("teamadmin", None, accounts.get("teamadmin").updated_at)
    accounts.set_grants("teamadmin", {"default": "admin"}, user.updated_at)
    scheduler_of(app).register(TaskDefinition(id="roles", name="Roles", cron="0 2 * * *"))
    client = app.test_client()
    assert Auth(client).login("teamadmin", "team-admin-password").status_code == 302
    for endpoint, path in GUARDED_PAGES.items():
        expected = 403 if endpoint in GLOBAL else 200
        assert client.get(path).status_code == expected, endpoint
    home = client.get("/").get_data(as_text=True)
    assert 'href="/users/"' not in home and 'href="/teams/"' not in home


@pytest.fixture
def clients(app: Flask) -> Iterator[dict[str, FlaskClient]]:
    scheduler_of(app).register(TaskDefinition(id="roles", name="Roles", cron="0 2 * * *"))
    signed_in = {}
    for role in ROLES:
        client = app.test_client()
        if role == "admin":
            response = Auth(client).login()
        else:
            accounts_of(app).create(f"{role}1", role, generate_password_hash(f"{role}-password-1"))
            response = Auth(client).login(f"{role}1", f"{role}-password-1")
        assert response.status_code == 302, role
        signed_in[role] = client
    yield signed_in


@pytest.mark.parametrize("endpoint", sorted(GUARDED_PAGES))
def test_a_guarded_page_refuses_the_roles_below_it(clients: dict[str, FlaskClient], endpoint: str) -> None:
    needed = NEEDED[endpoint]
    for role in ROLES[:ROLES.index(needed)]:
        assert clients[role].get(GUARDED_PAGES[endpoint]).status_code == 403, f"{role} on {endpoint}"
    for role in ROLES[ROLES.index(needed):]:
        assert clients[role].get(GUARDED_PAGES[endpoint]).status_code == 200, f"{role} on {endpoint}"


def test_each_role_may_do_what_the_roles_below_it_may(app: Flask, clients: dict[str, FlaskClient]) -> None:
    """Roles are ranked, not separate: an operator action is open to admins too."""
    scheduler_of(app).set_hooks({"on_task_execute": lambda event: "ok"})
    for role in ROLES:
        client = clients[role]
        response = client.post("/tasks/trigger/roles", data={"csrf_token": csrf_token(client, "/")})
        expected_refusal = ROLES.index(role) < ROLES.index("operator")
        assert (response.status_code == 403) == expected_refusal, f"{role}: {response.status_code}"
