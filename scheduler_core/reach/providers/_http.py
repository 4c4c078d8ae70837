"""What the HTTP providers (api, slack, pagerduty, aliyun-sms) make of one exchange (:mod:`scheduler_core.transport`).

The response body is read (at most 64 KiB) only to pick an id or a result code out of its JSON;
it is never returned, stored or quoted in an error.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import requests

from scheduler_core.reach.base import Delivery
from scheduler_core.reach.providers._delivery import ambiguous, delivered, not_started, safe_error
from scheduler_core.transport import HttpRequest, HttpResult, exchange

BODY_LIMIT = 64 * 1024
USER_AGENT = "hai-scheduler-reach"
TRANSIENT_STATUSES = frozenset({408, 425, 429})  # with every 5xx: the receiver may take it later


@dataclass(frozen=True)
class HttpAnswer:
    """What came back: a status (and the JSON body when it parsed), or why there is none."""

    status: int | None = None  # None: no complete answer
    data: Any = None  # the decoded JSON body when it was small and valid; for reading ids and codes only
    established: bool = False  # a connection was up: the request may have reached the server
    timed_out: bool = False  # the deadline ended the request
    error: str | None = None  # what went wrong, if anything did (no URL query, no secrets)


def _json(body: bytes | None) -> Any:
    if body is None:  # too big to be an answer we read anything from, or cut short
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # ValueError includes UnicodeDecodeError
        return None


def _answer(result: HttpResult, scrub: Iterable[str | None]) -> HttpAnswer:
    timed_out = result.stopped == "timeout" or isinstance(result.error, requests.Timeout)
    error = safe_error(result.error, scrub) if result.error is not None else None
    if result.status is None:
        return HttpAnswer(established=result.established, timed_out=timed_out, error=error)
    if result.error is not None:  # the status arrived, the body did not (all of it)
        return HttpAnswer(status=result.status, established=True, timed_out=timed_out, error=error)
    return HttpAnswer(status=result.status, data=_json(result.body), established=True)


def request_json(method: str, url: str, *, timeout_ms: int, headers: Mapping[str, str] | None = None,
                 json_body: Any = None, scrub: Iterable[str | None] = ()) -> HttpAnswer:
    """Send one request and read the answer, all within ``timeout_ms``. Never raises for network errors."""
    request = HttpRequest(method=method, url=url, timeout_ms=timeout_ms, body_limit=BODY_LIMIT,
                          user_agent=USER_AGENT, headers=dict(headers or {}), json_body=json_body)
    return _answer(exchange(request), scrub)


def no_answer(answer: HttpAnswer, budget_ms: int) -> Delivery:
    """No status: not connected means nothing was sent; anything later may have been delivered."""
    if not answer.established:
        if answer.timed_out:
            return not_started("provider_unavailable", f"timeout after {budget_ms} ms before connecting; not sent")
        return not_started("provider_unavailable", f"not connected: {answer.error}")
    if answer.timed_out:
        return ambiguous("transient_failure", f"timeout after {budget_ms} ms; the request may have been delivered")
    return ambiguous("transient_failure", f"connection lost after the request may have been sent: {answer.error}")


def webhook_verdict(answer: HttpAnswer, budget_ms: int, message_id: Callable[[Any], str]) -> Delivery:
    """A plain webhook's verdict on one exchange (the api and slack providers).

    A 2xx is sent, its id ``message_id(data)`` (``data``: the decoded JSON answer, or None); no
    status is :func:`no_answer`; 408, 425, 429 and 5xx are transient; any other status (3xx is not
    followed, other 4xx) is a permanent rejection. Every answer after connecting is started: a 500
    can come after the receiver acted. Errors quote our phrase for the status, never the body.
    """
    status = answer.status
    if status is None:
        return no_answer(answer, budget_ms)
    if 200 <= status < 300:
        return delivered(message_id(answer.data))
    text = f"HTTP {status} {status_phrase(status)}".strip()
    if status in TRANSIENT_STATUSES or status >= 500:
        return ambiguous("transient_failure", text)
    return ambiguous("permanent_rejection", text)


def status_phrase(status: int) -> str:
    """The standard reason phrase of ``status`` (ours, not the server's text); "" for an unknown one."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""
