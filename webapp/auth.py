"""Login, roles and the guards every request passes.

- No page or fragment without login, except ``/healthz``, static files and ``/metrics`` (its own
  token or address allow-list).
- Roles: viewer (read only) < operator (trigger, resolve, repair, requeue) < admin (tasks,
  templates, users). ``require_role`` answers 403 below the role.
- Sessions live on the server (``Logins``): the signed cookie carries a random token checked
  against the database on every request, so logout, a password reset, disabling and a role
  change end a session for good, even for a copy of the cookie; idle sessions expire.
- Failed logins are counted in the database, per client address and per account
  (``login_verdict``; HAI_TRUSTED_PROXIES says how many proxies' X-Forwarded-For to believe).
- Security headers on every response: a Content-Security-Policy without inline script,
  no framing, no MIME sniffing, no referrer leaks; ``Secure`` cookies when served over HTTPS;
  ``Cache-Control: no-store`` on every signed-in page and on the sign-in page.
- Every state-changing request to the dashboard comes from its own pages: behind the CSRF token,
  ``same_origin`` refuses (403) an ``Origin`` of another site and ``Sec-Fetch-Site: cross-site``.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, wraps
from typing import Any, TypeVar
from urllib.parse import urlsplit

from flask import (
    Blueprint,
    Flask,
    Response,
    abort,
    current_app,
    g,
    redirect,
    request,
    session,
    url_for,
)
from flask.typing import ResponseReturnValue
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.security import check_password_hash, generate_password_hash

from scheduler_core.access import Access, rank
from scheduler_core.errors import ConfigError
from scheduler_core.runtime.accounts import MAX_PASSWORD, ROLES, Accounts, Logins, LoginVerdict, User
from scheduler_core.settings import MAX_PROXIES
from scheduler_core.validation import check_int, shown
from webapp import oidc
from webapp.htmx import is_htmx
from webapp.node import accounts_of
from webapp.oidc import end_session_url
from webapp.signin import login_page, logins, safe_next, sign_on_of, start_signed_in

bp = Blueprint("auth", __name__)
PUBLIC_ENDPOINTS = {"auth.login", "health.healthz", "static", "oidc.start", "oidc.callback"}
PUBLIC_ENDPOINTS |= {"metrics.scrape"}  # its own token or address allow-list (webapp/metrics.py)
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
NO_STORE_PUBLIC = {"auth.login", "oidc.start", "oidc.callback"}  # its CSRF token and error are for one browser, once
GLOBAL_LINKS = {"users.index", "teams.index"}  # navigation shown to global admins only
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class CurrentUser:
    name: str
    access: Access  # the global role and the role in each team (scheduler_core/access.py)
    signs_on: bool = False  # with the identity provider (logout then ends the provider's session too)

    @property
    def role(self) -> str:
        """The highest role anywhere, as the navigation shows it ("none": no role at all)."""
        return self.access.highest or "none"

    def can(self, role: str, team: str | None = None) -> bool:
        return self.access.can(role, team)

    def can_globally(self, role: str) -> bool:
        """``role`` in every team: users, notification templates and global alert rules are everyone's."""
        return rank(self.access.global_role) >= rank(role)


def _users() -> Accounts:
    return accounts_of(current_app)


def client_address() -> str:
    """The address failed logins are counted by: the peer's, or -- behind HAI_TRUSTED_PROXIES
    proxies -- the one the outermost trusted proxy saw (ProxyFix). IPv6 counts by its /64: one
    client usually holds the whole network."""
    try:
        address = ipaddress.ip_address((request.remote_addr or "").strip())
    except ValueError:
        return "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network((address, 64), strict=False))
    return str(address)


@cache
def _decoy_hash() -> str:
    """A hash to check a password against when the user does not exist, so an unknown name
    takes as long to refuse as a wrong password."""
    return generate_password_hash("no user has this password")


def _throttled(next_url: str | None, verdict: LoginVerdict) -> Response:
    seconds = max(1, math.ceil(verdict.retry_after_ms / 1000))
    wait = f"{seconds} seconds" if seconds < 120 else f"{math.ceil(seconds / 60)} minutes"
    whom = "from your address" if verdict.reason == "address" else "for this user from your address"
    response = login_page(next_url, f"Too many failed sign-ins {whom}; try again in {wait}.", 429)
    response.headers["Retry-After"] = str(seconds)
    return response


@bp.route("/login", methods=["GET", "POST"])
def login() -> ResponseReturnValue:
    next_url = safe_next(request.values.get("next"))  # checked first: a bad one is dropped, never followed
    if request.method != "POST":  # GET, and HEAD: looking at the page is no sign-in attempt
        return login_page(next_url, None)
    if not sign_on_of().local:
        return login_page(next_url, "Local accounts are turned off here: use single sign-on.", 403)
    name = request.form.get("username", "").strip()
    password = request.form.get("password", "")
    address, counts = client_address(), logins()
    verdict = counts.verdict(address, name)
    if not verdict.allowed:
        return _throttled(next_url, verdict)
    counts.attempt(address, name)  # counted before the (slow) password check; taken back on success
    user = _known_user(name)
    # The hash is checked whether or not the user exists or is enabled: the time taken tells nothing.
    # A user who signs on with the identity provider has no password that matches (NO_PASSWORD).
    matches = len(password) <= MAX_PASSWORD and check_password_hash(
        user.password_hash if user is not None else _decoy_hash(), password)
    if user is None or user.disabled or not matches:
        return login_page(next_url, "Unknown user name or wrong password.", 401)
    counts.succeeded(address, user.name)
    start_signed_in(user.name)  # signing in again (as anyone) ends the session this browser had
    return redirect(next_url or url_for("overview.index"))


def _known_user(name: str) -> User | None:
    try:
        return _users().get(name) if name else None
    except ConfigError:  # no user can be named so (NUL, too long): a failed sign-in like any other
        return None


@bp.post("/logout")
def logout() -> ResponseReturnValue:
    provider_logout = end_session_url() if g.get("user") is not None and g.user.signs_on else None
    logins().end_session(session.get("sid"))  # the cookie's copies stop working too
    session.clear()
    session["signed_out"] = True  # the sign-in page says so, once
    return redirect(provider_logout or url_for("auth.login"))  # then the provider's session (RP-initiated)


def _load_user() -> ResponseReturnValue | None:
    g.user, g.session_token = None, None
    if request.endpoint == "static" or request.path.startswith("/api/"):
        return None  # the JSON API signs in by bearer token only (webapp/api/core.py): never by this cookie
    if "sid" in session:
        found = logins().session_user(session["sid"])
        if found is not None:
            found = oidc.check_session(found)  # groups read again when old; local accounts maybe turned off
            if found is None:
                logins().end_session(session["sid"])
        if found is not None:
            access = Access.of(found.role, found.grants)
            g.user, g.session_token = CurrentUser(found.name, access, found.signs_on), session["sid"]
        else:
            session.clear()  # ended, expired, or its user disabled: over for good
    elif "user" in session:
        session.clear()  # a cookie from before server-side sessions: sign in again
    if g.user is None and request.endpoint not in PUBLIC_ENDPOINTS:
        if is_htmx():
            response = Response(status=401)
            response.headers["HX-Redirect"] = url_for("auth.login")
            return response
        return redirect(url_for("auth.login", next=request.full_path.rstrip("?")))
    return None


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of an http(s) address, lower case, without the scheme's default
    port (the form browsers send in ``Origin``); None for anything else (``null``, junk)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    scheme, host = parts.scheme.lower(), parts.hostname
    host = f"[{host}]" if ":" in host else host  # IPv6
    return f"{scheme}://{host}" + ("" if port in (None, 80 if scheme == "http" else 443) else f":{port}")


def own_origins() -> set[str]:
    """The origins of this dashboard's pages: the address the request was sent to (its host,
    and its scheme as ProxyFix took it from X-Forwarded-Proto), the same host over https (a
    TLS-terminating proxy in front: nobody else can serve https for that host), and
    HAI_PUBLIC_URL when set (a proxy that sends another Host)."""
    candidates = [request.host_url, f"https://{request.host}/", current_app.config.get("PUBLIC_URL") or ""]
    return {origin for origin in map(origin_of, candidates) if origin is not None}


def same_origin() -> None:
    """A second layer behind the CSRF token for every POST, PUT, PATCH and DELETE to the
    dashboard: 403 when the browser says the request comes from another site. Requests without
    ``Origin`` and ``Sec-Fetch-Site`` (old browsers, curl) rely on the token alone; the JSON API
    signs in by bearer token only, so no browser can forge one of its calls."""
    if request.method not in UNSAFE_METHODS or request.path.startswith("/api/"):
        return
    if request.headers.get("Sec-Fetch-Site", "").strip().lower() == "cross-site":
        abort(403, "Refused: the browser says this request was sent from another site (Sec-Fetch-Site: "
                   "cross-site). Nothing was changed; use the dashboard's own pages.")
    origin = request.headers.get("Origin")
    own = own_origins()
    if origin is not None and origin_of(origin) not in own:
        abort(403, f"Refused: this request was sent from {shown(origin)}, not from this dashboard "
                   f"({', '.join(sorted(own))}). Nothing was changed. Behind a proxy that changes the address, "
                   "set HAI_PUBLIC_URL to the address people open.")


def own_session(name: str) -> str | None:
    """The current session's token when ``name`` is the signed-in user (a change they make to
    their own account keeps the session that made it; their other sessions end)."""
    return g.get("session_token") if g.get("user") is not None and g.user.name == name else None


def _security_headers(response: Response) -> Response:
    provider = oidc.logout_origin()  # the logout form's redirect goes on to the provider
    response.headers.setdefault("Content-Security-Policy", CSP if provider is None else
                                CSP.replace("form-action 'self'", f"form-action 'self' {provider}"))
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    if is_htmx() or request.endpoint not in PUBLIC_ENDPOINTS:
        response.vary.add("HX-Request")
        response.headers.setdefault("Cache-Control", "no-store")
    elif request.endpoint in NO_STORE_PUBLIC:
        response.headers.setdefault("Cache-Control", "no-store")
    return response


def require_role(role: str, globally: bool = False) -> Callable[[F], F]:
    """403 below ``role``: in some team (team-level work; the object's own team is checked where it
    is found), or ``globally`` (users, teams, notification templates: every team's). The
    guarded view keeps what it needs (``required_role``), so the route itself says what it needs:
    tests/webapp/test_route_walk.py walks every route by it."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")

    def decorate(view: F) -> F:
        @wraps(view)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            user = g.get("user")
            if user is None or not (user.can_globally(role) if globally else user.can(role)):
                abort(403)
            return view(*args, **kwargs)

        guarded.required_role = role  # type: ignore[attr-defined]
        guarded.required_globally = globally  # type: ignore[attr-defined]
        return guarded  # type: ignore[return-value]

    return decorate


def required_role(view: Callable[..., Any]) -> str | None:
    """The role a view needs (None: any signed-in user, or none for a public endpoint)."""
    role: str | None = getattr(view, "required_role", None)
    return role


def _template_globals() -> dict[str, Any]:
    links = [(endpoint, label) for endpoint, label in (
        ("overview.index", "Overview"), ("tasks.index", "Tasks"), ("timeline.index", "Timeline"),
        ("runs.index", "Runs"), ("executions.index", "Executions"),
        ("logs.index", "Logs"), ("notifications.index", "Notifications"), ("nodes.index", "Nodes"),
        ("audit.index", "Audit"), ("users.index", "Users"), ("teams.index", "Teams"))
        if endpoint in current_app.view_functions
        and (endpoint not in GLOBAL_LINKS or (g.get("user") is not None and g.user.can_globally("admin")))]
    return {"current_user": g.get("user"), "nav_links": links}


def install(app: Flask) -> None:
    app.extensions["hai_logins"] = Logins(app.extensions["hai_engine"])
    proxies = check_int(app.config.get("TRUSTED_PROXIES", 0), "HAI_TRUSTED_PROXIES", 0, MAX_PROXIES)
    if proxies:  # believe X-Forwarded-For as far as that many proxies of ours appended to it
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=proxies)  # type: ignore[method-assign]
    app.before_request(same_origin)  # before the sign-in check: a forged request gets no login redirect either
    app.before_request(_load_user)
    app.after_request(_security_headers)
    app.context_processor(_template_globals)
