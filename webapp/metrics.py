"""``/metrics``: Prometheus text format, without a dashboard login.

A scraper is let in by ``Authorization: Bearer <HAI_METRICS_TOKEN>`` or by its address being in
``HAI_METRICS_ALLOW`` (default: loopback only); behind ``HAI_TRUSTED_PROXIES`` proxies the
address is the one the outermost trusted proxy saw. These read every team's figures. A team's
scrape sends a personal API token instead: it reads what the token's user may see now (their
teams' series and counts; every team's for a global role), counted against the token's rate
limit like an API call. A wrong token is refused even from an allowed address. The figures
come from the database on each scrape (scheduler_core/runtime/metrics.py), so every gunicorn
worker answers alike.
"""

from __future__ import annotations

import hmac
import ipaddress

from flask import Blueprint, Flask, Response, current_app, request
from flask.typing import ResponseReturnValue

from scheduler_core.access import EVERY_TEAM, Scope
from scheduler_core.errors import SchedulerError
from scheduler_core.runtime.api_tokens import ApiTokens
from scheduler_core.runtime.metrics import CONTENT_TYPE, Metrics
from scheduler_core.settings import metrics_networks, metrics_token

bp = Blueprint("metrics", __name__)


def install(app: Flask) -> None:
    """Register ``/metrics``; check its settings (a test configuration too) and keep what a scrape needs."""
    app.register_blueprint(bp)
    app.extensions["hai_metrics"] = Metrics(app.extensions["hai_engine"])
    app.extensions["hai_metrics_token"] = metrics_token(app.config.get("METRICS_TOKEN"))
    networks = metrics_networks(app.config.get("METRICS_ALLOW"))
    app.extensions["hai_metrics_allow"] = tuple(ipaddress.ip_network(n) for n in networks)


def _bearer() -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def _allowed_address() -> bool:
    try:
        address = ipaddress.ip_address((request.remote_addr or "").strip())
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in current_app.extensions["hai_metrics_allow"])


def _refused(status: int, message: str) -> Response:
    response = Response(message + "\n", status=status, mimetype="text/plain")
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


def _token_scope(given: str) -> Scope | Response:
    """What a personal API token's user may see now, or the refusal."""
    tokens: ApiTokens = current_app.extensions["hai_api_tokens"]
    try:
        check = tokens.use(given, int(current_app.config["API_RATE_LIMIT"]))
    except SchedulerError as exc:  # the scrape is answered, and Prometheus marks the target down
        return _refused(503, f"the database did not answer, so the token could not be checked: {exc.name}")
    if check is None:
        return _refused(401, "wrong metrics token (neither HAI_METRICS_TOKEN nor a valid personal API token)")
    if not check.allowed:
        response = _refused(429, "this token's rate limit is reached")
        response.headers["Retry-After"] = str(max(1, -(-check.retry_after_ms // 1000)))
        return response
    scope = check.access.scope("viewer")
    if scope.teams is not None and not scope.teams:
        return _refused(403, f"{check.username} may see no team")
    return scope


@bp.get("/metrics")
def scrape() -> ResponseReturnValue:
    expected, given = current_app.extensions["hai_metrics_token"], _bearer()
    scope: Scope | Response = EVERY_TEAM
    if given is not None:
        if expected is None or not hmac.compare_digest(given.encode(), expected.encode()):
            scope = _token_scope(given)
    elif not _allowed_address():
        if expected is not None:
            return _refused(401, "metrics need Authorization: Bearer <HAI_METRICS_TOKEN> (or a personal API token)")
        return _refused(403, "this address may not read metrics (HAI_METRICS_ALLOW)")
    if isinstance(scope, Response):
        return scope
    body = current_app.extensions["hai_metrics"].render(scope)
    return Response(body, headers={"Content-Type": CONTENT_TYPE, "Cache-Control": "no-store"})
