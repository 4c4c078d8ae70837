"""One place that maps failures to HTTP answers (pages, or fragments for HTMX)."""

from __future__ import annotations

from flask import Flask, Response, render_template, request
from flask.typing import ResponseReturnValue
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException

from scheduler_core.errors import (
    ConfigError,
    ConflictError,
    ExecutionNotFoundError,
    ReachConfigError,
    ReachError,
    SchedulerError,
    TaskNotFoundError,
    TemplateNotFoundError,
)
from webapp.api.core import ApiProblem, problem_response
from webapp.htmx import is_htmx


def _page(code: int, title: str, message: str) -> ResponseReturnValue:
    return render_template("errors.html", code=code, title=title, message=message), code


def _csrf(error: CSRFError) -> ResponseReturnValue:
    body = render_template("errors.html", code=400, title="Please try again",
                           message="This form expired or was not sent from this dashboard. The page has been "
                                   "refreshed; submit it again.")
    response = Response(body, status=400)
    if is_htmx():
        response.headers["HX-Refresh"] = "true"  # a fresh token, instead of a dead button
    return response


def _http(error: HTTPException) -> ResponseReturnValue:
    if request.path.startswith("/api/"):  # no such API route, or not with this method: a problem, not a page
        code = error.code or 500
        # The exception's own headers (a 405's Allow: the methods the path has, RFC 9110), not its HTML type.
        headers = {name: value for name, value in error.get_headers() if name.lower() != "content-type"}
        return problem_response(ApiProblem(code, error.name, error.description or error.name, f"hai:api:{code}",
                                           headers=headers))
    return _page(error.code or 500, error.name, error.description or "")


def _scheduler(error: SchedulerError) -> ResponseReturnValue:
    if isinstance(error, TaskNotFoundError | ExecutionNotFoundError):
        return _page(404, "Not found", str(error))
    if isinstance(error, ConflictError):
        return _page(409, "Changed meanwhile", str(error))
    if isinstance(error, ConfigError):
        return _page(400, "Invalid input", str(error))
    return _page(500, "Scheduler error", str(error))


def _reach(error: ReachError) -> ResponseReturnValue:
    if isinstance(error, TemplateNotFoundError):
        return _page(404, "Not found", str(error))
    if isinstance(error, ReachConfigError):
        return _page(400, "Invalid input", str(error))
    if error.details.get("conflict"):
        return _page(409, "Changed meanwhile", str(error))
    return _page(500, "Notification error", str(error))


def install(app: Flask) -> None:
    app.register_error_handler(CSRFError, _csrf)
    app.register_error_handler(HTTPException, _http)
    app.register_error_handler(SchedulerError, _scheduler)
    app.register_error_handler(ReachError, _reach)
