"""Teams (global admins only, docs/teams.md): every team on one page, with a form to create one
(its id and display name), to rename one (its display name: an id never changes) and to delete
one, as the ``hai-scheduler teams`` commands do. What may not be done the core refuses (a bad id
or name, an id taken, ``default``, a team that still has tasks or alert rules): the page comes
back with its message next to the field and nothing changed. A team that is not there answers
404. URLs put the action before the id (``/teams/rename/<team_id>``), as on the Users pages."""

from __future__ import annotations

from flask import Blueprint, abort, current_app, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from scheduler_core.errors import ConfigError
from scheduler_core.runtime.accounts import TEAM_NAME_MAX, Accounts
from scheduler_core.validation import TEAM_MAX
from webapp.audit import record_action
from webapp.auth import require_role
from webapp.htmx import shown_again
from webapp.node import accounts_of

bp = Blueprint("teams", __name__, url_prefix="/teams")
FIELDS = ("team", "name")  # the fields a message is shown next to; any other is shown beside the id


def _accounts() -> Accounts:
    return accounts_of(current_app)


def _message(exc: ConfigError) -> str:
    text = exc.message.removeprefix(f"{exc.field}: ")
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _name_or_404(team_id: str) -> str:
    """The display name of the team ``team_id``; 404 when there is none."""
    for team in _accounts().team_list():
        if team.id == team_id:
            return team.name
    abort(404, f"No team {team_id!r} here.")


def _page(status: int = 200, errors: dict[str, str] | None = None, target: str | None = None,
          values: dict[str, str] | None = None) -> ResponseReturnValue:
    """The list; after a refused post its ``errors`` (field -> message) about ``target`` (a team's
    row; None: the create form), with ``values`` as typed (see ``shown_again``)."""
    return shown_again(render_template("teams/index.html", teams=_accounts().team_list(), errors=errors or {},
                                       target=target, values=values or {}, id_max=TEAM_MAX, name_max=TEAM_NAME_MAX),
                       status)


def _refused(exc: ConfigError, target: str | None, values: dict[str, str]) -> ResponseReturnValue:
    return _page(400, {exc.field if exc.field in FIELDS else "team": _message(exc)}, target, values)


@bp.get("/")
@require_role("admin", globally=True)
def index() -> ResponseReturnValue:
    return _page()


@bp.post("/new")
@require_role("admin", globally=True)
def create() -> ResponseReturnValue:
    values = {"team": request.form.get("team", "").strip(), "name": request.form.get("name", "").strip()}
    try:
        team = _accounts().create_team(values["team"], values["name"])  # an empty name is refused, naming it
    except ConfigError as exc:
        return _refused(exc, None, values)
    record_action("team.create", team.id, after={"id": team.id, "name": team.name})
    flash(f"Team {team.id} created ({team.name}).", "success")
    return redirect(url_for("teams.index")), 303


@bp.post("/rename/<team_id>")
@require_role("admin", globally=True)
def rename(team_id: str) -> ResponseReturnValue:
    before = _name_or_404(team_id)
    name = request.form.get("name", "").strip()
    if name == before:
        flash(f"Team {team_id} is already named {name}: nothing to change.", "info")
        return redirect(url_for("teams.index")), 303
    try:
        team = _accounts().rename_team(team_id, name)
    except ConfigError as exc:  # a bad name, or the team deleted meanwhile
        return _refused(exc, team_id, {"name": name})
    record_action("team.rename", team_id, before={"name": before}, after={"name": team.name})
    flash(f"Team {team_id} is now named {team.name}.", "success")
    return redirect(url_for("teams.index")), 303


@bp.post("/delete/<team_id>")
@require_role("admin", globally=True)
def delete(team_id: str) -> ResponseReturnValue:
    before = _name_or_404(team_id)
    try:
        removed = _accounts().delete_team(team_id)
    except ConfigError as exc:  # default, a team with tasks or alert rules, or deleted meanwhile
        return _refused(exc, team_id, {})
    record_action("team.delete", team_id, before={"id": team_id, "name": before}, after={"roles_removed": removed})
    roles = f": {removed} role{'' if removed == 1 else 's'} granted in it removed" if removed else ""
    flash(f"Team {team_id} deleted{roles}.", "success")
    return redirect(url_for("teams.index")), 303
