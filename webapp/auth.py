"""Login, roles and the guards every request passes.

- No page or fragment without login, except ``/healthz`` and static files.
- Roles: viewer (read only) < operator (trigger, resolve, repair, requeue) < admin (tasks,
  templates, users). ``require_role`` answers 403 below the role.
- Login attempts are rate limited per client address and user name.
- Security headers on every response: a Content-Security-Policy without inline script,
  no framing, no MIME sniffing, no referrer leaks; ``Secure`` cookies when served over HTTPS.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
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
    render_template,
    request,
    session,
    url_for,
)
from flask.typing import ResponseReturnValue
from werkzeug.security import check_password_hash

from scheduler_core.runtime.accounts import ROLES, Accounts
from webapp.htmx import is_htmx
from webapp.node import accounts_of

bp = Blueprint("auth", __name__)
PUBLIC_ENDPOINTS = {"auth.login", "health.healthz", "static"}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
MAX_FAILURES = 5
FAILURE_WINDOW_S = 300.0
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class CurrentUser:
    name: str
    role: str

    def can(self, role: str) -> bool:
        return ROLES.index(self.role) >= ROLES.index(role)


class LoginThrottle:
    """At most MAX_FAILURES failed logins per (address, name) within FAILURE_WINDOW_S."""

    def __init__(self) -> None:
        self._failures: dict[tuple[str, str], deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    def blocked(self, key: tuple[str, str]) -> bool:
        with self._lock:
            recent = self._failures[key]
            while recent and time.monotonic() - recent[0] > FAILURE_WINDOW_S:
                recent.popleft()
            return len(recent) >= MAX_FAILURES

    def failed(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._failures[key].append(time.monotonic())

    def succeeded(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._failures.pop(key, None)


def _throttle() -> LoginThrottle:
    throttle: LoginThrottle = current_app.extensions["hai_login_throttle"]
    return throttle


def _users() -> Accounts:
    return accounts_of(current_app)


def _safe_next(target: str | None) -> str:
    if target and target.startswith("/") and not target.startswith("//") and not urlsplit(target).netloc:
        return target
    return url_for("overview.index")


@bp.route("/login", methods=["GET", "POST"])
def login() -> ResponseReturnValue:
    next_url = request.values.get("next")
    if request.method == "GET":
        return render_template("auth/login.html", next=next_url, error=None)
    name = request.form.get("username", "").strip()
    key = (request.remote_addr or "?", name)
    throttle = _throttle()
    if throttle.blocked(key):
        return render_template("auth/login.html", next=next_url,
                               error="Too many failed attempts; wait a few minutes."), 429
    user = _users().get(name) if name else None
    if user is None or user.disabled or not check_password_hash(user.password_hash, request.form.get("password", "")):
        throttle.failed(key)
        return render_template("auth/login.html", next=next_url, error="Unknown user name or wrong password."), 401
    throttle.succeeded(key)
    session.clear()
    session["user"] = user.name
    session["credential"] = _credential(user.password_hash)
    session.permanent = True
    _users().record_login(user.name)
    return redirect(_safe_next(next_url))


@bp.post("/logout")
def logout() -> ResponseReturnValue:
    session.clear()
    return redirect(url_for("auth.login"))


def _credential(password_hash: str) -> str:
    """A short fingerprint of the user's password hash kept in the session: a password reset
    ends every other session of that user (the hash itself never leaves the database)."""
    return hashlib.sha256(password_hash.encode()).hexdigest()[:16]


def _load_user() -> ResponseReturnValue | None:
    g.user = None
    name = session.get("user")
    if name:
        user = _users().get(name)
        if user is not None and not user.disabled and session.get("credential") == _credential(user.password_hash):
            g.user = CurrentUser(user.name, user.role)
        else:
            session.clear()  # disabled, deleted or password reset: this session is over for good
    if g.user is None and request.endpoint not in PUBLIC_ENDPOINTS:
        if is_htmx():
            response = Response(status=401)
            response.headers["HX-Redirect"] = url_for("auth.login")
            return response
        return redirect(url_for("auth.login", next=request.full_path.rstrip("?")))
    return None


def _security_headers(response: Response) -> Response:
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    if is_htmx() or request.endpoint not in PUBLIC_ENDPOINTS:
        response.vary.add("HX-Request")
        response.headers.setdefault("Cache-Control", "no-store")
    return response


def require_role(role: str) -> Callable[[F], F]:
    """403 below ``role``. The guarded view keeps the role it needs (``required_role``), so the
    route itself says what it needs: tests/webapp/test_route_walk.py walks every route by it."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")

    def decorate(view: F) -> F:
        @wraps(view)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if g.get("user") is None or not g.user.can(role):
                abort(403)
            return view(*args, **kwargs)

        guarded.required_role = role  # type: ignore[attr-defined]
        return guarded  # type: ignore[return-value]

    return decorate


def required_role(view: Callable[..., Any]) -> str | None:
    """The role a view needs (None: any signed-in user, or none for a public endpoint)."""
    role: str | None = getattr(view, "required_role", None)
    return role


def _template_globals() -> dict[str, Any]:
    links = [(endpoint, label) for endpoint, label in (
        ("overview.index", "Overview"), ("tasks.index", "Tasks"), ("executions.index", "Executions"),
        ("logs.index", "Logs"), ("notifications.index", "Notifications"), ("nodes.index", "Nodes"),
        ("audit.index", "Audit"), ("users.index", "Users")) if endpoint in current_app.view_functions
        and (endpoint != "users.index" or (g.get("user") is not None and g.user.can("admin")))]
    return {"current_user": g.get("user"), "nav_links": links}


def install(app: Flask) -> None:
    app.extensions["hai_login_throttle"] = LoginThrottle()  # per app: one process may host several
    app.before_request(_load_user)
    app.after_request(_security_headers)
    app.context_processor(_template_globals)
