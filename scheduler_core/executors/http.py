"""``kind: api``: one HTTP request per attempt, under one deadline.

Handler config (stored as JSON)::

    {"kind": "api", "url": "https://billing.example/run", "method": "POST",
     "headers": {"Authorization": "Bearer ..."}, "body": {...},
     "timeout": 30000, "max_response_bytes": 1048576}

Outcome rules, and why
----------------------
Calling another system is only safe to repeat when repeating it cannot do the work twice. The
scheduler cannot know that; the task says so (``idempotent``). The executor reports what it
knows for sure and the engine decides what to do with it:

* **2xx**: ``success``. The result is the body, JSON-decoded when it parses as JSON, else the
  text (UTF-8, undecodable bytes replaced); ``None`` for an empty body. A result whose JSON
  text is over 64 KiB is replaced by ``{"truncated": True, "preview": <first 64 KiB>, "bytes": n}``
  so that the log stays small.
* **Nothing was sent** (name resolution failed, connection refused, connect timeout, TLS
  handshake failed, a URL that cannot be requested): ``failed`` whatever the task says. The
  server never saw the request, so another attempt cannot duplicate anything.
* **The request may have reached the server** (the connection was established): a timeout, a
  response over ``max_response_bytes``, a connection dropped before the whole response arrived
  and any non-2xx status are *ambiguous*: the work may have been done without us seeing the
  answer (a 500 can come after a commit, a 409 can mean "already done"). A non-idempotent task
  gets ``unknown``: an operator has to look before it runs again, because a blind retry could
  charge a card twice. An idempotent task gets ``failed``, which the engine retries within the
  task's budget; the receiver deduplicates on ``Idempotency-Key`` (the occurrence id, stable
  across retries and takeovers). For a non-2xx status the body is kept as the result (same
  decoding and preview) so the operator sees what the server said.
* **Cancellation** (the node closes, the lease is lost, ...): ``interrupted`` with
  ``cancelled: <reason>`` when nothing was sent yet, otherwise ambiguous as above with that error.

An invalid handler config is refused before anything is sent (``failed``, CONFIG_ERROR with the
field). A 3xx is not followed: it is a non-2xx answer like any other, and following it would
send the scheduler's headers (and the user's credentials) somewhere the task does not name.

One deadline
------------
``timeout`` covers everything: name resolution, connect, TLS handshake, sending and reading the
whole body. ``requests``' own timeouts apply to each socket operation, so a server trickling one
byte a second would never trip them. The request therefore runs in a worker thread while the
calling thread is the watchdog: it waits for the worker, the deadline or the cancel signal,
whichever comes first. To stop the worker it shuts down every socket the attempt opened (the
connection classes hand each socket to the watchdog *before* connecting), so a blocked connect,
send or read fails at once. "Maybe sent" is decided by whether a connection was established
when the watchdog fired or the worker failed, not by guessing from exception types. The worker
owns its ``requests.Session`` and closes it; the watchdog only shuts sockets down, never closes
them, so a file descriptor is never closed under the thread using it. Name resolution
(``getaddrinfo``) and a TLS handshake in progress cannot be interrupted: the watchdog still
returns on time (after a short grace for the worker) and the worker ends on its own, aborting at
its next step.

The node's environment is not consulted (``trust_env`` is off): no proxy variables, no
``~/.netrc`` credentials, no CA bundle variables. What is sent, and where, is what the handler says.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import requests

from scheduler_core.errors import ConfigError
from scheduler_core.executors.base import CancelSignal, ExecutionContext, ExecutionRequest, Outcome
from scheduler_core.executors.http_watch import Watch, WatchedAdapter
from scheduler_core.secrets import MASK, is_secret_name, mask_url

__all__ = ["HttpExecutor", "request_headers"]

METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
DEFAULT_TIMEOUT_MS = 30_000
TIMEOUT_RANGE_MS = (1, 86_400_000)
DEFAULT_MAX_RESPONSE_BYTES = 1_048_576
MAX_SAFE_INTEGER = 2**53 - 1
RESULT_LIMIT_BYTES = 64 * 1024
SETTINGS = ("kind", "url", "method", "headers", "body", "timeout", "max_response_bytes")


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an RFC 9110 token
_CHUNK_BYTES = 16 * 1024
_POLL_S = 0.02  # how often the watchdog looks at the cancel signal
_GRACE_S = 0.5  # how long the watchdog waits for a stopped worker before returning anyway
_BACKSTOP_S = 0.25  # socket timeouts end a little after the deadline, never before it


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
        raise ConfigError("handler.method", f"must be one of {', '.join(METHODS)} (got {value!r})")
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
    value = config.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"handler.{name}", f"must be an integer between {low} and {high} (got {value!r})")
    return value


# --- one attempt: the worker and its watchdog -----------------------------------------


@dataclass(frozen=True)
class _Call:
    """One attempt's request, ready to send."""

    method: str
    url: str
    headers: dict[str, str]
    body: Any  # None: no body
    timeout_ms: int
    max_response_bytes: int
    idempotent: bool


def _ambiguous(call: _Call, error: str, result: Any = None) -> Outcome:
    """The request may have reached the server: retry only what is idempotent."""
    return Outcome("failed" if call.idempotent else "unknown", result, error)


def _root_cause(exc: BaseException) -> BaseException:
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        reason = getattr(exc, "reason", None)
        nested = [arg for arg in exc.args if isinstance(arg, BaseException)]
        following = next((candidate for candidate in (reason if isinstance(reason, BaseException) else None,
                                                      exc.__cause__, *nested, exc.__context__)
                          if candidate is not None), None)
        if following is None:
            return exc
        exc = following
    return exc


def _describe(exc: BaseException, call: _Call) -> str:
    """What went wrong, without the URL's password or a secret header's value."""
    if isinstance(exc, requests.exceptions.InvalidHeader):
        return "invalid request header"
    root = _root_cause(exc)
    text = f"{type(root).__name__}: {root}"[:500]
    text = text.replace(call.url, mask_url(call.url))
    password = urlsplit(call.url).password
    if password:
        text = text.replace(password, MASK)
    for name, value in call.headers.items():
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


def _read_body(response: requests.Response, limit: int) -> bytes | None:
    """The whole body, or None as soon as more than ``limit`` bytes arrived (reading stops there)."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_content(chunk_size=_CHUNK_BYTES):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _judge(response: requests.Response, call: _Call) -> Outcome:
    status = response.status_code
    body = _read_body(response, call.max_response_bytes)
    answer = f"HTTP {status} {response.reason or ''}".strip()[:200]
    if body is None:
        suffix = "" if 200 <= status < 300 else f" ({answer})"
        return _ambiguous(call, f"response exceeded max_response_bytes ({call.max_response_bytes}){suffix}")
    if 200 <= status < 300:
        return Outcome("success", _result(body))
    return _ambiguous(call, answer, _result(body))


def _send(call: _Call, watch: Watch) -> Outcome:
    """The worker: one request on a session of its own, closed whatever happens."""
    session = requests.Session()
    session.trust_env = False
    session.headers["User-Agent"] = "hai-scheduler"
    adapter = WatchedAdapter(watch)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    socket_timeout = call.timeout_ms / 1000 + _BACKSTOP_S  # the watchdog is the deadline; this is a backstop
    try:
        response = session.request(call.method, call.url, headers=call.headers,
                                   json=call.body, timeout=socket_timeout,
                                   stream=True, allow_redirects=False)
        try:
            return _judge(response, call)
        finally:
            response.close()
    except Exception as exc:
        if not watch.established:
            return Outcome("failed", error=f"request not sent: {_describe(exc, call)}")
        return _ambiguous(call, f"connection lost after the request may have been sent: {_describe(exc, call)}")
    finally:
        session.close()


def _work(call: _Call, watch: Watch) -> None:
    try:
        outcome = _send(call, watch)
    except BaseException as exc:  # never leave the watchdog waiting
        outcome = Outcome("failed", error=f"executor error: {type(exc).__name__}")
    watch.finish(outcome)


def _supervise(watch: Watch, signal: CancelSignal, deadline: float) -> str | None:
    """Wait for the worker; return why it must be stopped (timeout / cancelled), None once it finished."""
    while not watch.done.wait(max(0.0, min(_POLL_S, deadline - time.monotonic()))):
        if signal.is_set():
            return "cancelled"
        if time.monotonic() >= deadline:
            return "timeout"
    return None


def _cancelled(signal: CancelSignal) -> str:
    return f"cancelled: {signal.reason or 'cancelled'}"


def _stopped_outcome(call: _Call, cause: str, sent: bool, signal: CancelSignal) -> Outcome:
    if cause == "cancelled":
        return _ambiguous(call, _cancelled(signal)) if sent else Outcome("interrupted", error=_cancelled(signal))
    error = f"timeout after {call.timeout_ms} ms"
    return _ambiguous(call, error) if sent else Outcome("failed", error=f"{error}; the request was not sent")


def _run(call: _Call, signal: CancelSignal) -> Outcome:
    """The watchdog: run the worker and stop it at the deadline or on cancellation."""
    watch = Watch()
    deadline = time.monotonic() + call.timeout_ms / 1000
    worker = threading.Thread(target=_work, args=(call, watch), name="hai-scheduler-http", daemon=True)
    worker.start()
    cause = _supervise(watch, signal, deadline)
    sent = watch.stop() if cause else None
    worker.join(_GRACE_S if cause else None)
    if cause is None or sent is None:  # the worker finished first: its outcome stands
        assert watch.outcome is not None
        return watch.outcome
    return _stopped_outcome(call, cause, sent, signal)


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
    """Executes ``kind: api`` handlers: one HTTP request per attempt (see the module docstring)."""

    kind = "api"

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(config, Mapping):
            raise ConfigError("handler", "must be a mapping with a 'kind'")
        for key in config:
            if key not in SETTINGS:
                raise ConfigError(f"handler.{key}", "is not an api handler setting")
        if config.get("kind") != self.kind:
            raise ConfigError("handler.kind", f"must be {self.kind!r} (got {config.get('kind')!r})")
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
            return Outcome("failed", error=f"{exc.code} {exc.name} {exc.message}")
        if request.signal.is_set():
            return Outcome("interrupted", error=_cancelled(request.signal))
        call = _Call(method=config["method"], url=config["url"],
                     headers=request_headers(config["headers"], request.context),
                     body=config.get("body"), timeout_ms=config["timeout"],
                     max_response_bytes=config["max_response_bytes"],
                     idempotent=bool(getattr(request.task, "idempotent", False)))
        return _run(call, request.signal)
