"""``kind: api``: one HTTP request per attempt, under one deadline.

Handler config: ``{"kind": "api", "url", "method", "headers", "body", "timeout", "max_response_bytes"}``.
The outcome rules (success, definite failure, ambiguous by the task's idempotency, cancellation) are
in docs/executors-and-providers.md; the transport itself is :mod:`scheduler_core.transport`.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import requests

from scheduler_core.errors import ConfigError
from scheduler_core.executors.base import CancelSignal, ExecutionContext, ExecutionRequest, Outcome
from scheduler_core.masking import MASK, is_secret_name, mask_url
from scheduler_core.statuses import AttemptStatus
from scheduler_core.transport import HttpRequest, HttpResult, exchange, root_cause
from scheduler_core.validation import check_int, shown

__all__ = ["HttpExecutor", "request_headers"]

METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
DEFAULT_TIMEOUT_MS = 30_000
TIMEOUT_RANGE_MS = (1, 86_400_000)
DEFAULT_MAX_RESPONSE_BYTES = 1_048_576
MAX_SAFE_INTEGER = 2**53 - 1
RESULT_LIMIT_BYTES = 64 * 1024
SETTINGS = ("kind", "url", "method", "headers", "body", "timeout", "max_response_bytes")


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an RFC 9110 token


# --- validation -------------------------------------------------------------------


def _validate_url(value: Any) -> str:
    if value is None:
        raise ConfigError("handler.url", "is required")
    if not isinstance(value, str) or not value:
        raise ConfigError("handler.url", "must be a non-empty string")
    if any(char.isspace() or ord(char) < 32 or ord(char) == 127 for char in value):
        raise ConfigError("handler.url", "must not contain whitespace or control characters")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        raise ConfigError("handler.url", f"is not a valid URL ({exc})") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ConfigError("handler.url", "must be an http:// or https:// URL")
    if not parts.hostname:
        raise ConfigError("handler.url", "must name a host")
    return value


def _validate_method(value: Any) -> str:
    method = value.upper() if isinstance(value, str) else None
    if method not in METHODS:
        raise ConfigError("handler.method", f"must be one of {', '.join(METHODS)} (got {shown(value)})")
    return method


def _validate_header(name: Any, value: Any, seen: set[str]) -> None:
    if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
        raise ConfigError(f"handler.headers.{name}", "is not a valid header name")
    field = f"handler.headers.{name}"
    if name.lower() in seen:
        raise ConfigError(field, "is given twice (header names are case-insensitive)")
    seen.add(name.lower())
    # Messages never quote the value: it may be a credential.
    if not isinstance(value, str):
        raise ConfigError(field, f"must be a string (got {type(value).__name__})")
    if any(char in value for char in "\r\n\0"):
        raise ConfigError(field, "must not contain CR, LF or NUL")
    if value[:1].isspace():
        raise ConfigError(field, "must not start with whitespace")
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise ConfigError(field, "must be latin-1 text (percent-encode anything else)") from None


def _validate_headers(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError("handler.headers", f"must be a mapping of names to strings (got {type(value).__name__})")
    seen: set[str] = set()
    for name, header_value in value.items():
        _validate_header(name, header_value, seen)
    return dict(value)


def _validate_body(value: Any) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError("handler.body", f"must be JSON ({exc})") from None


def _validate_int(config: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    return check_int(config.get(name, default), f"handler.{name}", low, high)


# --- one attempt: what its exchange means -----------------------------------------


def _ambiguous(idempotent: bool, error: str, result: Any = None) -> Outcome:
    """The request may have reached the server: retry only what is idempotent."""
    return Outcome(AttemptStatus.FAILED if idempotent else AttemptStatus.UNKNOWN, result, error)


def _describe(exc: BaseException, request: HttpRequest) -> str:
    """What went wrong, without the URL's password or a secret header's value."""
    if isinstance(exc, requests.exceptions.InvalidHeader):
        return "invalid request header"
    root = root_cause(exc)
    text = f"{type(root).__name__}: {root}"[:500]
    text = text.replace(request.url, mask_url(request.url))
    password = urlsplit(request.url).password
    if password:
        text = text.replace(password, MASK)
    for name, value in request.headers.items():
        if value and is_secret_name(name):
            text = text.replace(value, MASK)
    return text


def _decode(body: bytes) -> Any:
    if not body:
        return None
    try:
        return json.loads(body, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):  # ValueError includes UnicodeDecodeError and the NaN refusal
        return body.decode("utf-8", errors="replace")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not storable JSON")


def _result(body: bytes) -> Any:
    """The response body as the attempt's result, cut to a preview when its JSON is over 64 KiB."""
    value = _decode(body)
    if len(json.dumps(value, ensure_ascii=False).encode()) <= RESULT_LIMIT_BYTES:
        return value
    return {"truncated": True, "preview": body[:RESULT_LIMIT_BYTES].decode("utf-8", errors="replace"),
            "bytes": len(body)}


def _cancelled(signal: CancelSignal) -> str:
    return f"cancelled: {signal.reason or 'cancelled'}"


def _stopped(answer: HttpResult, request: HttpRequest, idempotent: bool, signal: CancelSignal) -> Outcome:
    """The deadline or the cancellation ended the exchange: was anything sent by then?"""
    if answer.stopped == "cancelled":
        if answer.established:
            return _ambiguous(idempotent, _cancelled(signal))
        return Outcome(AttemptStatus.INTERRUPTED, error=_cancelled(signal))
    error = f"timeout after {request.timeout_ms} ms"
    if answer.established:
        return _ambiguous(idempotent, error)
    return Outcome(AttemptStatus.FAILED, error=f"{error}; the request was not sent")


def _judge(answer: HttpResult, request: HttpRequest, idempotent: bool, signal: CancelSignal) -> Outcome:
    if answer.stopped is not None:
        return _stopped(answer, request, idempotent, signal)
    if isinstance(answer.error, Exception):  # the connection, or the body, failed
        if not answer.established:
            return Outcome(AttemptStatus.FAILED, error=f"request not sent: {_describe(answer.error, request)}")
        return _ambiguous(idempotent, "connection lost after the request may have been sent: "
                                      f"{_describe(answer.error, request)}")
    if answer.error is not None:  # not an Exception: the worker itself broke down
        return Outcome(AttemptStatus.FAILED, error=f"executor error: {type(answer.error).__name__}")
    status = answer.status or 0
    text = f"HTTP {status} {answer.reason}".strip()[:200]
    if answer.body is None:
        suffix = "" if 200 <= status < 300 else f" ({text})"
        return _ambiguous(idempotent, f"response exceeded max_response_bytes ({request.body_limit}){suffix}")
    if 200 <= status < 300:
        return Outcome(AttemptStatus.SUCCESS, _result(answer.body))
    return _ambiguous(idempotent, text, _result(answer.body))


def _scheduler_headers(context: ExecutionContext) -> dict[str, str]:
    return {
        "Idempotency-Key": context.occurrence_id,
        "X-Scheduler-Sequence": str(context.sequence),
        "X-Scheduler-Attempt": str(context.attempt),
        "X-Scheduler-Task": quote(context.task_id, safe=""),
    }


def request_headers(user: Mapping[str, str], context: ExecutionContext) -> dict[str, str]:
    """The user's headers, then the scheduler's, which replace a user header of the same name in any case."""
    scheduler = _scheduler_headers(context)
    reserved = {name.lower() for name in scheduler}
    headers = {name: value for name, value in user.items() if name.lower() not in reserved}
    headers.update(scheduler)
    return headers


class HttpExecutor:
    """Executes ``kind: api`` handlers: one HTTP request per attempt (docs/executors-and-providers.md)."""

    kind = "api"

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(config, Mapping):
            raise ConfigError("handler", "must be a mapping with a 'kind'")
        for key in config:
            if key not in SETTINGS:
                raise ConfigError(f"handler.{key}", "is not an api handler setting")
        if config.get("kind") != self.kind:
            raise ConfigError("handler.kind", f"must be {self.kind!r} (got {shown(config.get('kind'))})")
        normalised: dict[str, Any] = {
            "kind": self.kind,
            "url": _validate_url(config.get("url")),
            "method": _validate_method(config.get("method", "GET")),
            "headers": _validate_headers(config.get("headers")),
            "timeout": _validate_int(config, "timeout", DEFAULT_TIMEOUT_MS, *TIMEOUT_RANGE_MS),
            "max_response_bytes": _validate_int(config, "max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES, 1,
                                                MAX_SAFE_INTEGER),
        }
        if config.get("body") is not None:
            _validate_body(config["body"])
            normalised["body"] = copy.deepcopy(config["body"])
        return normalised

    def execute(self, request: ExecutionRequest) -> Outcome:
        try:
            config = self.validate(request.handler)
        except ConfigError as exc:  # refused before anything is sent
            return Outcome(AttemptStatus.FAILED, error=f"{exc.code} {exc.name} {exc.message}")
        if request.signal.is_set():
            return Outcome(AttemptStatus.INTERRUPTED, error=_cancelled(request.signal))
        http = HttpRequest(method=config["method"], url=config["url"], timeout_ms=config["timeout"],
                           body_limit=config["max_response_bytes"], user_agent="hai-scheduler",
                           headers=request_headers(config["headers"], request.context),
                           json_body=config.get("body"))
        idempotent = bool(getattr(request.task, "idempotent", False))
        return _judge(exchange(http, request.signal), http, idempotent, request.signal)
