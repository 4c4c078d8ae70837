"""What every way of signing in shares: the sign-in page, where to go afterwards (``safe_next``)
and starting the server-side session (``start_signed_in``). Used by the password form
(webapp/auth.py) and by single sign-on (webapp/oidc.py)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from flask import Response, current_app, make_response, render_template, session

from scheduler_core.oidc_settings import SignOn
from scheduler_core.runtime.accounts import Logins
from webapp.node import accounts_of

MAX_NEXT = 2000  # a longer "next" is no page of this dashboard


def logins() -> Logins:
    found: Logins = current_app.extensions["hai_logins"]
    return found


def sign_on_of() -> SignOn:
    found: SignOn = current_app.extensions.get("hai_sign_on") or SignOn()
    return found


def safe_next(target: Any) -> str | None:
    """Where to go after signing in: a path of this site, or None. Refused: anything not
    starting with one ``/`` (``//host``, ``/\\host`` and schemes leave the site), backslashes,
    control characters (CR/LF would split the Location header), unpaired surrogates, over MAX_NEXT."""
    if not isinstance(target, str) or not target.startswith("/") or len(target) > MAX_NEXT:
        return None
    if target.startswith("//") or "\\" in target or any(ord(c) < 0x20 or ord(c) == 0x7F for c in target):
        return None
    try:
        target.encode("utf-8")
    except UnicodeEncodeError:
        return None
    parts = urlsplit(target)
    return target if not parts.scheme and not parts.netloc else None


def login_page(next_url: str | None, error: str | None, status: int = 200) -> Response:
    """The sign-in page; ``error`` is the password form's. What single sign-on refused and a
    logout's confirmation come once, from the session (a redirect brought the browser here)."""
    sign_on = sign_on_of()
    refused = session.pop("sso_refused", None)
    notice = "You are signed out." if session.pop("signed_out", None) else None
    return make_response(render_template(
        "auth/login.html", next=next_url, error=error, local=sign_on.local, notice=notice,
        sso_error=refused.get("message") if isinstance(refused, dict) else None,
        sso_switch=bool(refused.get("switch")) if isinstance(refused, dict) else False,
        sso=sign_on.oidc.name if sign_on.oidc is not None else None), status)


def start_signed_in(name: str, sign_on: dict[str, Any] | None = None) -> None:
    """A new session of ``name`` for this browser (with its single sign-on state, kept on the
    server); the one it had (as anyone) ends."""
    logins().end_session(session.get("sid"))
    session.clear()
    session["sid"] = logins().start_session(name, sign_on)
    session.permanent = True
    accounts_of(current_app).record_login(name)
