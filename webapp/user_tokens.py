"""Personal API tokens on the Users page (admin only): create one for any user, shown once;
list a user's tokens; revoke one. The JSON API itself is ``webapp/api/``.

Who creates tokens: an admin, for any user, here or with ``hai-scheduler create-token``. A user
cannot create their own: a token is a standing credential that outlives the session and is
used by machines, so an admin decides who gets one and for how long, and every creation and
revocation lands in the audit trail (``token.create`` / ``token.revoke``, never the secret).

Post/redirect/get: the form's POST creates the token sealed with a one-time pad
(``ApiTokens.create(..., sealed=True)``), keeps the pad in the session under the token's id and
redirects to ``/users/tokens/created/<user>/<id>``, whose GET opens the sealed token once
(``reveal_once``) and shows it (``Cache-Control: no-store``). A reload, the back button or another
browser finds nothing to open: "already shown", and no second token. The token itself is never in
a URL, a log or the session cookie (signed, not encrypted: it holds the pad, which alone tells
nothing; the database holds the sealed token, which alone tells nothing either).

A user's tokens have distinct names, revoked ones included; the list and the revoke confirmation
name each by its name, its first characters (``hai_Ab3xYz…``) and its creation time.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, current_app, flash, make_response, redirect, render_template, session, url_for
from flask import request as http_request
from flask.typing import ResponseReturnValue

from scheduler_core.errors import ConfigError
from scheduler_core.runtime.accounts import MIN_PASSWORD, ROLES, User
from scheduler_core.runtime.api_tokens import MAX_EXPIRES_DAYS, ApiToken, ApiTokens
from webapp.audit import record_action
from webapp.auth import require_role
from webapp.forms import whole_number
from webapp.htmx import shown_again
from webapp.node import accounts_of
from webapp.timefmt import fsi, utc_text

bp = Blueprint("user_tokens", __name__, url_prefix="/users/tokens")
_FORM_FIELD = {"name": "token_name", "expires_days": "token_expires_days", "user": "token_name"}
PADS = "token_pads"  # session key: [token id, the one-time pad that opens its sealed copy once], oldest first
KEPT_PADS = 5  # tokens created in this browser and not shown yet (several tabs); older pads are dropped


def _tokens() -> ApiTokens:
    tokens: ApiTokens = current_app.extensions["hai_api_tokens"]
    return tokens


def _user_or_404(name: str) -> User:
    user = accounts_of(current_app).get(name)
    if user is None:
        abort(404, f"No user named {name!r}.")
    return user


@bp.app_context_processor
def _token_list() -> dict[str, Any]:
    """``api_tokens_of(name)`` for the user page's token section."""
    return {"api_tokens_of": lambda name: _tokens().list_for(name), "max_expires_days": MAX_EXPIRES_DAYS,
            "token_label": token_label}


def token_label(token: ApiToken) -> str:
    """How a person tells a token apart: ``ci (hai_Ab3xYz…, created 2026-12-03 11:02:05 UTC)``, the
    name isolated (``fsi``: a right-to-left override in it cannot reorder the rest)."""
    prefix = f"{token.prefix}…, " if token.prefix else ""
    return f"{fsi(token.name)} ({prefix}created {utc_text(token.created_at)})"


def _manage(user: User, errors: dict[str, str], typed: dict[str, str]) -> ResponseReturnValue:
    accounts = accounts_of(current_app)
    return shown_again(render_template("users/manage.html", account=user, errors=errors, roles=ROLES,
                                       min_password=MIN_PASSWORD, token_typed=typed,
                                       grants=accounts.grants(user.name), teams=accounts.teams()), 400)


def _audit_token(token: ApiToken) -> dict[str, Any]:
    return {"token_id": token.id, "name": token.name, "prefix": token.prefix, "expires_at": token.expires_at}


@bp.post("/new/<name>")
@require_role("admin", globally=True)
def create(name: str) -> ResponseReturnValue:
    user = _user_or_404(name)
    typed = {"name": http_request.form.get("name", "").strip(), "expires_days": http_request.form.get(
        "expires_days", "").strip()}
    days = None
    if typed["expires_days"]:
        days = whole_number(typed["expires_days"])
        if days is None:
            return _manage(user, {"token_expires_days": f"A whole number of days, 1 to {MAX_EXPIRES_DAYS}, or "
                                                        "empty for a token that never expires."}, typed)
    try:
        created = _tokens().create(name, typed["name"], days, sealed=True)
    except ConfigError as exc:
        return _manage(user, {_FORM_FIELD.get(exc.field, "token_name"): exc.message.removeprefix(f"{exc.field}: ")},
                       typed)
    record_action("token.create", name, after=_audit_token(created.token))
    session[PADS] = [*_pads()[-(KEPT_PADS - 1):], [created.token.id, created.pad]]  # a list: JSON keeps its order
    return redirect(url_for("user_tokens.created", name=name, token_id=created.token.id)), 303


def _pads() -> list[list[str]]:
    """This session's pads of tokens not shown yet, oldest first (anything malformed is dropped)."""
    kept = session.get(PADS)
    if not isinstance(kept, list):
        return []
    return [[str(pair[0]), str(pair[1])] for pair in kept if isinstance(pair, list) and len(pair) == 2]


@bp.get("/created/<name>/<token_id>")
@require_role("admin", globally=True)
def created(name: str, token_id: str) -> ResponseReturnValue:
    """The new token, the first time this browser opens the page; "already shown" (410) after."""
    user = _user_or_404(name)
    token = _tokens().get(token_id)
    if token is None or token.username != name:
        abort(404, f"{name} has no token {token_id}.")
    pads = _pads()
    pad = next((pad for kept_id, pad in pads if kept_id == token_id), None)
    if pad is not None:
        session[PADS] = [[kept_id, kept] for kept_id, kept in pads if kept_id != token_id]
    secret = _tokens().reveal_once(name, token_id, pad) if pad is not None else None
    page = render_template("users/token_created.html", account=user, token=token, secret=secret)
    return make_response(page, 200 if secret else 410)


@bp.post("/revoke/<name>/<token_id>")
@require_role("admin", globally=True)
def revoke(name: str, token_id: str) -> ResponseReturnValue:
    _user_or_404(name)
    token = _tokens().get(token_id)
    if token is None or token.username != name or not _tokens().revoke(name, token_id):
        flash(f"{name} has no active token {token_id}: nothing was changed.", "error")
        return redirect(url_for("users.manage", name=name)), 303
    record_action("token.revoke", name, before=_audit_token(token), after={"revoked": True})
    flash(f"Token {token_label(token)} of {name} is revoked: it stops working at once.", "success")
    return redirect(url_for("users.manage", name=name)), 303
