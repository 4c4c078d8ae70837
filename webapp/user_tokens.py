"""Personal API tokens on the Users page (admin only): create one for any user, shown once;
list a user's tokens; revoke one. The JSON API itself is ``webapp/api/``.

Who creates tokens: an admin, for any user, here or with ``hai-scheduler create-token``. A user
cannot create their own: a token is a standing credential that outlives the session and is
used by machines, so an admin decides who gets one and for how long, and every creation and
revocation lands in the audit trail (``token.create`` / ``token.revoke``, never the secret).

The new token is shown on the answer to the form itself (``Cache-Control: no-store``), never
flashed: flashed messages travel in the signed, unencrypted session cookie.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, current_app, flash, redirect, render_template, url_for
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

bp = Blueprint("user_tokens", __name__, url_prefix="/users/tokens")
_FORM_FIELD = {"name": "token_name", "expires_days": "token_expires_days", "user": "token_name"}


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
    return {"api_tokens_of": lambda name: _tokens().list_for(name), "max_expires_days": MAX_EXPIRES_DAYS}


def _manage(user: User, errors: dict[str, str], typed: dict[str, str]) -> ResponseReturnValue:
    return shown_again(render_template("users/manage.html", account=user, errors=errors, roles=ROLES,
                                       min_password=MIN_PASSWORD, token_typed=typed), 400)


def _audit_token(token: ApiToken) -> dict[str, Any]:
    return {"token_id": token.id, "name": token.name, "expires_at": token.expires_at}


@bp.post("/new/<name>")
@require_role("admin")
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
        created = _tokens().create(name, typed["name"], days)
    except ConfigError as exc:
        return _manage(user, {_FORM_FIELD.get(exc.field, "token_name"): exc.message.removeprefix(f"{exc.field}: ")},
                       typed)
    record_action("token.create", name, after=_audit_token(created.token))
    return render_template("users/token_created.html", account=user, token=created.token, secret=created.secret)


@bp.post("/revoke/<name>/<token_id>")
@require_role("admin")
def revoke(name: str, token_id: str) -> ResponseReturnValue:
    _user_or_404(name)
    token = _tokens().get(token_id)
    if token is None or token.username != name or not _tokens().revoke(name, token_id):
        flash(f"{name} has no active token {token_id}: nothing was changed.", "error")
        return redirect(url_for("users.manage", name=name)), 303
    record_action("token.revoke", name, before=_audit_token(token), after={"revoked": True})
    flash(f"Token {token.name!r} of {name} is revoked: it stops working at once.", "success")
    return redirect(url_for("users.manage", name=name)), 303
