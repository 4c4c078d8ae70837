"""Users (admin only): list, create, change a role, disable / enable, reset a password. Each
change is a compare-and-set on the user's ``updated_at`` and ends the user's sessions (an admin
changing their own account keeps the session they do it from); passwords are hashed here (werkzeug)
and never shown, flashed or audited; the last enabled admin stays. URLs put the action before
the name (``/users/role/<name>``): a user may be called ``new``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, abort, current_app, flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.security import generate_password_hash

from scheduler_core.errors import ConfigError, ConflictError
from scheduler_core.runtime.accounts import (
    MIN_PASSWORD,
    ROLES,
    Accounts,
    User,
    check_new_password,
    check_role,
    check_username,
)
from webapp.audit import record_action
from webapp.auth import own_session, require_role
from webapp.forms import posted_version
from webapp.htmx import shown_again
from webapp.node import accounts_of

bp = Blueprint("users", __name__, url_prefix="/users")
PAGE = 50
CONFLICT = ("changed since the page was loaded (someone else may have changed it). "
            "Nothing was changed; review it again.")
MISSING_VERSION = "The page is missing the user's version; reload it."


def _accounts() -> Accounts:
    return accounts_of(current_app)


def _message(exc: ConfigError) -> str:
    text = exc.message.removeprefix(f"{exc.field}: ")
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _audit(action: str, target: str, before: Any = None, after: Any = None) -> None:
    """Audited with the user's name, role and state only: never a password or its hash."""
    record_action(action, target, before=before, after=after)


def _form_page(template: str, status: int, **context: Any) -> ResponseReturnValue:
    """A form page: the form shown again with its errors when ``status`` is 400 (see ``shown_again``)."""
    return shown_again(render_template(template, **context), status)


def _user_or_404(name: str) -> User:
    user = _accounts().get(name)
    if user is None:
        abort(404, f"No user named {name!r}.")
    return user


# --- list ---------------------------------------------------------------------------------------


@bp.get("/")
@require_role("admin", globally=True)
def index() -> ResponseReturnValue:
    """Every user by name, PAGE at a time (keyset on the name: ``after``)."""
    after = (request.args.get("after") or "").strip() or None
    try:
        rows = _accounts().page(after, PAGE + 1)
    except ConfigError as exc:
        abort(400, _message(exc))
    more = len(rows) > PAGE
    rows = rows[:PAGE]
    return render_template("users/index.html", users=rows, after=after, next_after=rows[-1].name if more else None,
                           admins=_accounts().count_enabled_admins())


# --- create -------------------------------------------------------------------------------------


def _new_form(values: dict[str, str], errors: dict[str, str], status: int = 200) -> ResponseReturnValue:
    return _form_page("users/new.html", status, values=values, errors=errors, roles=ROLES, min_password=MIN_PASSWORD)


@bp.get("/new")
@require_role("admin", globally=True)
def new() -> ResponseReturnValue:
    return _new_form({"name": "", "role": "viewer"}, {})


@bp.post("/new")
@require_role("admin", globally=True)
def create() -> ResponseReturnValue:
    form = request.form
    # A refused form shows everything again as typed, the passwords too (the answer is never cached).
    values = {"name": form.get("name", "").strip(), "role": form.get("role", ""), "password": form.get("password", ""),
              "confirm": form.get("confirm", "")}
    errors = _create_errors(values, values["password"], values["confirm"])
    if errors:
        return _new_form(values, errors, 400)
    try:
        created = _accounts().create(values["name"], values["role"], generate_password_hash(form["password"]))
    except ConfigError as exc:
        return _new_form(values, {exc.field: _message(exc)}, 400)
    if not created:
        return _new_form(values, {"name": f"A user named {values['name']} already exists."}, 400)
    _audit("user.create", values["name"], after={"name": values["name"], "role": values["role"], "disabled": False})
    flash(f"User {values['name']} created ({values['role']}).", "success")
    return redirect(url_for("users.index")), 303


def _create_errors(values: dict[str, str], password: str, confirm: str) -> dict[str, str]:
    """Every field's problem at once (the core checks them again when storing)."""
    errors: dict[str, str] = {}
    checks: list[Callable[[], str]] = [lambda: check_username(values["name"]), lambda: check_role(values["role"]),
                                       lambda: check_new_password(password, confirm)]
    for check in checks:
        try:
            check()
        except ConfigError as exc:
            errors[exc.field] = _message(exc)
    return errors


# --- one user: role, disable / enable, password ------------------------------------------------


def _manage(user: User, errors: dict[str, str] | None = None, status: int = 200,
            password_typed: dict[str, str] | None = None) -> ResponseReturnValue:
    accounts = _accounts()
    return _form_page("users/manage.html", status, account=user, errors=errors or {}, roles=ROLES,
                      min_password=MIN_PASSWORD, password_typed=password_typed or {},
                      grants=accounts.grants(user.name), teams=accounts.teams())


def _conflict(name: str) -> ResponseReturnValue:
    flash(f"User {name} {CONFLICT}", "error")
    return redirect(url_for("users.manage", name=name)), 303


@bp.get("/manage/<name>")
@require_role("admin", globally=True)
def manage(name: str) -> ResponseReturnValue:
    return _manage(_user_or_404(name))


@bp.post("/role/<name>")
@require_role("admin", globally=True)
def set_role(name: str) -> ResponseReturnValue:
    user = _user_or_404(name)
    role, expected = request.form.get("role", ""), posted_version()
    if expected is None:
        return _manage(user, {"role": MISSING_VERSION}, 400)
    if role == (user.role or "none") and expected == user.updated_at:
        flash(f"{name} is already {role}: nothing to change.", "info")
        return redirect(url_for("users.manage", name=name)), 303
    try:
        changed = _accounts().set_role(name, role, expected, keep_session=own_session(name))
    except ConflictError:
        return _conflict(name)
    except ConfigError as exc:  # a bad role, or the last enabled admin
        return _manage(user, {"role": _message(exc)}, 400)
    _audit("user.role", name, before={"role": user.role}, after={"role": changed.role})
    now = f"is now {changed.role}" if changed.role else "has no global role now (team roles only)"
    flash(f"{name} {now}{'' if name == g.user.name else ': their open sessions have ended'}.", "success")
    if name == g.user.name and changed.role != "admin":  # stepped down: the users pages are closed to them now
        return redirect(url_for("overview.index")), 303
    return redirect(url_for("users.manage", name=name)), 303


@bp.post("/team-role/<name>")
@require_role("admin", globally=True)
def set_team_role(name: str) -> ResponseReturnValue:
    """One team's role of the user (``none``: no role there); the others stay."""
    user = _user_or_404(name)
    team, role, expected = request.form.get("team", ""), request.form.get("role", ""), posted_version()
    if expected is None:
        return _manage(user, {"team_role": MISSING_VERSION}, 400)
    accounts = _accounts()
    before = accounts.grants(name)
    grants = {t: r for t, r in before.items() if t != team}
    if role != "none":
        grants[team] = role
    try:
        if team not in accounts.teams():
            raise ConfigError("team", f"no team {team[:64]!r} here")
        accounts.set_grants(name, grants, expected, keep_session=own_session(name))
    except ConflictError:
        return _conflict(name)
    except ConfigError as exc:
        return _manage(user, {"team_role": _message(exc)}, 400)
    _audit("user.team_role", name, before={"teams": before}, after={"teams": grants})
    flash(f"{name}'s role in {team} is now {role}"
          f"{'' if name == g.user.name else ': their open sessions have ended'}.", "success")
    return redirect(url_for("users.manage", name=name)), 303


@bp.post("/disable/<name>")
@require_role("admin", globally=True)
def disable(name: str) -> ResponseReturnValue:
    return _set_disabled(name, True)


@bp.post("/enable/<name>")
@require_role("admin", globally=True)
def enable(name: str) -> ResponseReturnValue:
    return _set_disabled(name, False)


def _set_disabled(name: str, disabled: bool) -> ResponseReturnValue:
    user = _user_or_404(name)
    expected = posted_version()
    if expected is None:
        return _manage(user, {"disabled": MISSING_VERSION}, 400)
    try:
        changed = _accounts().set_disabled(name, disabled, expected, actor=g.user.name)
    except ConflictError:
        return _conflict(name)
    except ConfigError as exc:  # themselves, or the last enabled admin
        return _manage(user, {"disabled": _message(exc)}, 400)
    verb = "disable" if disabled else "enable"
    _audit(f"user.{verb}", name, before={"disabled": user.disabled}, after={"disabled": changed.disabled})
    flash(f"{name} is {'disabled: every session of theirs has ended' if disabled else 'enabled'}.", "success")
    return redirect(url_for("users.manage", name=name)), 303


@bp.post("/password/<name>")
@require_role("admin", globally=True)
def reset_password(name: str) -> ResponseReturnValue:
    user = _user_or_404(name)
    expected = posted_version()
    password, confirm = request.form.get("password", ""), request.form.get("confirm", "")
    typed = {"password": password, "confirm": confirm}  # a refused form shows both again, as typed
    try:
        check_new_password(password, confirm)
    except ConfigError as exc:
        return _manage(user, {exc.field: _message(exc)}, 400, typed)
    if expected is None:
        return _manage(user, {"password": MISSING_VERSION}, 400, typed)
    try:
        _accounts().reset_password(name, generate_password_hash(password), expected, keep_session=own_session(name))
    except ConflictError:
        return _conflict(name)
    _audit("user.password", name, after={"password_reset": True})
    flash(f"The password of {name} was reset{'' if name == g.user.name else '; their open sessions have ended'}.",
          "success")
    return redirect(url_for("users.manage", name=name)), 303
