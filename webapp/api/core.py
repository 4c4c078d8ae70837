"""What every JSON API operation goes through, in this order:

1. the token: ``Authorization: Bearer <token>`` only -- no cookie signs an API call in, so the
   API needs no CSRF token (it is exempt) and a browser's session cannot be ridden; 401 without
   a valid token (missing, malformed, unknown, revoked, expired, its user disabled);
2. the rate limit: per token, per minute of the DB clock, counted in the database so every
   gunicorn worker counts against the same number (``HAI_API_RATE_LIMIT``); 429 with
   ``Retry-After`` beyond it;
3. the role: the user's role *now* (viewer < operator < admin), as on the pages; 403 below it;
4. the path's ids, the query string and the body, validated by the types the handler annotates
   its path arguments with and the operation's pydantic models (422 naming the field; 415 for a
   body that is not sent as ``application/json``, 400 for one that is not a JSON object, 413 for
   one that is too large);
5. the handler, which calls the runtime services the pages call; the core's errors become
   problem details here (``problem_of``), with the stable code and the field.

``operation`` registers a handler on the blueprint and in ``OPERATIONS``, from which
``openapi.py`` builds the document: one declaration serves validation and documentation.
Every path answers ``OPTIONS`` without a token, and a method it does not have with 405 (``options``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from flask import Blueprint, Response, current_app, g, request
from pydantic import BaseModel, TypeAdapter, ValidationError

from scheduler_core.access import Access
from scheduler_core.errors import (
    ConfigError,
    ConflictError,
    DatabaseError,
    ExecutionNotFoundError,
    InvalidCronError,
    ReachConfigError,
    ReachError,
    SchedulerError,
    TaskAlreadyExistsError,
    TaskNotFoundError,
    TemplateNotFoundError,
)
from scheduler_core.runtime.api_tokens import ApiTokens, TokenCheck
from webapp.auth import CurrentUser
from webapp.node import audit_of

logger = logging.getLogger("webapp.api")
bp = Blueprint("api", __name__, url_prefix="/api/v1")
PROBLEM_JSON = "application/problem+json"
MAX_BODY = 1_048_576  # a task definition is a few KiB; a larger body is refused unread
CONFIG_CODE = ConfigError.code
AUTH_CODE = "hai:api:401"
FORBIDDEN_CODE = "hai:api:403"
NOT_FOUND_CODE = "hai:api:404"
RATE_CODE = "hai:api:429"
BODY_CODE = "hai:api:400"
TOO_LARGE_CODE = "hai:api:413"
MEDIA_TYPE_CODE = "hai:api:415"
CONFLICT_CODE = "hai:api:409"
# application/json, or a +json type (application/merge-patch+json, ...); parameters (charset) aside
_JSON_TYPE = re.compile(r"application/(?:[\w.+-]+\+)?json", re.ASCII | re.IGNORECASE)
_RULE_ARGUMENT = re.compile(r"<(?:[a-z]+:)?([a-z_]+)>")


@dataclass(frozen=True)
class Operation:
    """One documented operation: its route, the role it needs and its models."""

    method: str
    rule: str  # the Flask rule under /api/v1, e.g. /tasks/<path:task_id>
    endpoint: str
    summary: str
    role: str
    query: type[BaseModel] | None
    body: type[BaseModel] | None
    response: type[BaseModel]
    status: int
    tag: str
    path_types: dict[str, Any] = field(default_factory=dict)  # argument -> the handler's annotation

    @property
    def path(self) -> str:
        """The OpenAPI path template (``/api/v1/tasks/{task_id}``)."""
        return bp.url_prefix + _RULE_ARGUMENT.sub(r"{\1}", self.rule)  # type: ignore[operator]

    @property
    def path_arguments(self) -> list[str]:
        return _RULE_ARGUMENT.findall(self.rule)


OPERATIONS: list[Operation] = []


@dataclass(frozen=True)
class Caller:
    name: str
    access: Access  # the token's user's global role and team roles, read for this request
    token_id: str
    token_name: str

    @property
    def role(self) -> str:
        return self.access.highest or "none"

    def audit(self, action: str, target: str | None, *, before: Any = None, after: Any = None,
              reason: str | None = None, team: str | None = None) -> None:
        """Record the action as the page does (same action names), actor = the token's user, and
        say it came through the API with which token."""
        via = {"via": "api", "token_id": self.token_id, "token_name": self.token_name}
        shown = {**after, **via} if isinstance(after, dict) else {"value": after, **via}
        audit_of(current_app).record(self.name, action, target, before=before, after=shown, reason=reason,
                                     team=team)


# --- problem details ----------------------------------------------------------------------------


class ApiProblem(Exception):
    """An answer that is a problem, raised anywhere in a handler."""

    def __init__(self, status: int, title: str, detail: str, code: str, field: str | None = None,
                 headers: dict[str, str] | None = None, errors: list[dict[str, str]] | None = None) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail, self.code, self.field = status, title, detail, code, field
        self.headers = headers or {}
        self.errors = errors


def problem_response(problem: ApiProblem) -> Response:
    body: dict[str, Any] = {"type": f"urn:hai-scheduler:problem:{problem.code}", "title": problem.title,
                            "status": problem.status, "detail": problem.detail, "code": problem.code,
                            "field": problem.field}
    if problem.errors is not None:
        body["errors"] = problem.errors
    response = Response(json.dumps(body, ensure_ascii=False), status=problem.status, mimetype=PROBLEM_JSON)
    response.headers.update(problem.headers)
    return response


def _invalid(field: str, message: str) -> ApiProblem:
    return ApiProblem(422, "Invalid input", f"{field}: {message}", CONFIG_CODE, field)


def problem_of(error: SchedulerError | ReachError) -> ApiProblem:
    """The core's error as the API answers it: the stable code, and the field it names."""
    field = getattr(error, "field", None)
    if isinstance(error, InvalidCronError):
        return ApiProblem(422, "Invalid input", error.message, error.code, "cron")
    if isinstance(error, ConfigError | ReachConfigError):
        return ApiProblem(422, "Invalid input", error.message, error.code, field)
    if isinstance(error, TaskNotFoundError | ExecutionNotFoundError | TemplateNotFoundError):
        return ApiProblem(404, "Not found", error.message, error.code)
    if isinstance(error, TaskAlreadyExistsError):
        return ApiProblem(409, "Already exists", error.message, error.code, "id")
    if isinstance(error, ConflictError) or (isinstance(error, ReachError) and error.details.get("conflict")):
        return ApiProblem(409, "Changed meanwhile", error.message, error.code, "expected_updated_at")
    if isinstance(error, ReachError):  # not in the state the action needs (e.g. not dead any more)
        return ApiProblem(409, "Conflict", error.message, error.code)
    if isinstance(error, DatabaseError):
        return ApiProblem(503, "Database unavailable", error.message, error.code)
    return ApiProblem(500, "Scheduler error", error.message, error.code)


def _validation_problem(error: ValidationError, where: str) -> ApiProblem:
    found = []
    for item in error.errors(include_url=False, include_input=False):
        path = ".".join(str(part) for part in item["loc"]) or where
        found.append({"field": path, "message": str(item["msg"])})
    first = found[0] if found else {"field": where, "message": "is invalid"}
    return ApiProblem(422, "Invalid input", f"{first['field']}: {first['message']}", CONFIG_CODE, first["field"],
                      errors=found)


# --- reading the request ------------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _too_large() -> ApiProblem:
    return ApiProblem(413, "Body too large", f"the body must be at most {MAX_BODY} bytes", TOO_LARGE_CODE, "body")


def _check_media_type() -> None:
    """A body is JSON by its Content-Type too (``application/json``, with or without a charset,
    or a ``+json`` type): a form or text/plain -- what a page can send across sites without
    asking first -- is refused unread."""
    sent = request.headers.get("Content-Type", "")
    if not _JSON_TYPE.fullmatch(sent.split(";", 1)[0].strip()):
        shown = json.dumps(sent[:100]) if sent else "none"
        raise ApiProblem(415, "Unsupported media type", f"send the body as application/json (Content-Type: "
                         f"{shown})", MEDIA_TYPE_CODE, "Content-Type", {"Accept-Post": "application/json"})


def read_body(model: type[BaseModel]) -> BaseModel:
    """The body as ``model``: sent as JSON (415), a JSON object (400 when it is not one), then
    the model's checks (422)."""
    if (request.content_length or 0) > MAX_BODY:
        raise _too_large()
    _check_media_type()
    raw = request.get_data(cache=False)
    if len(raw) > MAX_BODY:
        raise _too_large()
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, NaN, 5,000-digit numbers, deep nests
        raise ApiProblem(400, "Not JSON", f"the body must be a JSON object: {str(exc)[:200]}", BODY_CODE,
                         "body") from None
    if not isinstance(value, dict):
        raise ApiProblem(400, "Not a JSON object", f"the body must be a JSON object (got {type(value).__name__})",
                         BODY_CODE, "body")
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise _validation_problem(exc, "body") from None
    except RecursionError:
        raise ApiProblem(400, "Not JSON", "the body is nested too deeply", BODY_CODE, "body") from None


def read_path(op: Operation, path: dict[str, Any]) -> dict[str, Any]:
    """The path's arguments, each checked by the type its handler annotates it with (the core's
    check: its error names the argument)."""
    for name, value in path.items():
        _adapter(op.path_types[name]).validate_python(value, context={"field": name})
    return path


_adapters: dict[int, TypeAdapter[Any]] = {}


def _adapter(annotation: Any) -> TypeAdapter[Any]:
    if id(annotation) not in _adapters:
        _adapters[id(annotation)] = TypeAdapter(annotation)
    return _adapters[id(annotation)]


def read_query(model: type[BaseModel]) -> BaseModel:
    """The query string as ``model``, each parameter once (pydantic reads numbers in ASCII digits only)."""
    values: dict[str, str] = {}
    for name, value in request.args.items(multi=True):
        if name in values:
            raise _invalid(name, "is given twice")
        values[name] = value
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise _validation_problem(exc, "query") from None


# --- the token, the rate limit, the role --------------------------------------------------------


def _bearer() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _caller(role: str) -> Caller:
    token = _bearer()
    unauthorized = {"WWW-Authenticate": 'Bearer realm="hai-scheduler"'}
    if token is None:
        raise ApiProblem(401, "Unauthorized", "send Authorization: Bearer <token> (a personal API token; "
                         "cookies do not sign API calls in)", AUTH_CODE, "Authorization", unauthorized)
    tokens: ApiTokens = current_app.extensions["hai_api_tokens"]
    check: TokenCheck | None = tokens.use(token, int(current_app.config["API_RATE_LIMIT"]))
    if check is None:
        raise ApiProblem(401, "Unauthorized", "the token is unknown, revoked or expired, or its user is disabled",
                         AUTH_CODE, "Authorization", {**unauthorized, "WWW-Authenticate":
                                                      'Bearer realm="hai-scheduler", error="invalid_token"'})
    if not check.allowed:
        seconds = max(1, -(-check.retry_after_ms // 1000))
        raise ApiProblem(429, "Too many requests", f"this token's rate limit is reached; retry in {seconds} s",
                         RATE_CODE, None, {"Retry-After": str(seconds)})
    g.api_remaining = check.remaining
    caller = Caller(check.username, check.access, check.token_id, check.token_name)
    g.user = CurrentUser(caller.name, caller.access)
    if not caller.access.can(role):
        raise ApiProblem(403, "Forbidden", f"this needs the {role} role; {caller.name} is {caller.role}",
                         FORBIDDEN_CODE)
    return caller


def _answer(result: Any, status: int) -> Response:
    if isinstance(result, Response):
        return result
    body = result.model_dump(mode="json")
    response = Response(json.dumps(body, ensure_ascii=False), status=status, mimetype="application/json")
    return response


def operation(method: str, rule: str, *, summary: str, role: str, response: type[BaseModel],
              query: type[BaseModel] | None = None, body: type[BaseModel] | None = None, status: int = 200,
              tag: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``handler(caller, [query], [body], **path)`` as one documented operation."""

    def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
        hints = get_type_hints(handler, include_extras=True)
        op = Operation(method, rule, handler.__name__, summary, role, query, body, response, status,
                       tag or rule.strip("/").split("/")[0],
                       {name: hints[name] for name in _RULE_ARGUMENT.findall(rule)})

        def view(**path: Any) -> Response:
            try:
                caller = _caller(op.role)
                arguments: list[Any] = [caller]
                path = read_path(op, path)
                if op.query is not None:
                    arguments.append(read_query(op.query))
                if op.body is not None:
                    arguments.append(read_body(op.body))
                return _answer(handler(*arguments, **path), op.status)
            except ApiProblem as problem:
                return problem_response(problem)
            except (SchedulerError, ReachError) as error:
                return problem_response(problem_of(error))

        view.__name__ = handler.__name__
        view.required_role = role  # type: ignore[attr-defined]  # read by the route tests, as for pages
        bp.add_url_rule(rule, handler.__name__, view, methods=[method])
        OPERATIONS.append(op)
        return handler

    return decorate


def not_found(detail: str) -> ApiProblem:
    return ApiProblem(404, "Not found", detail, NOT_FOUND_CODE)


def options() -> Response | None:
    """``OPTIONS`` on an API path: 204 and the methods it has, before any token is asked for.

    Every path under /api/v1 answers ``OPTIONS`` with 204 and ``Allow`` (no token needed: it says
    only which methods the path has, as the public document does), and a method it does not have
    with a 405 problem carrying ``Allow`` (webapp/errors.py)."""
    if request.method != "OPTIONS":
        return None
    allowed = current_app.url_map.bind_to_environ(request.environ).allowed_methods()
    response = Response(status=204, headers={"Allow": ", ".join(sorted(allowed))})
    del response.headers["Content-Type"]  # no body
    return response


def after_request(response: Response) -> Response:
    """Every API answer: never cached, and the requests left in the token's window."""
    response.headers["Cache-Control"] = "no-store"
    remaining = g.get("api_remaining")
    if remaining is not None:
        response.headers["X-RateLimit-Remaining"] = str(remaining)
    return response


bp.before_request(options)
bp.after_request(after_request)
