"""What the api and aliyun-sms providers make of one HTTP exchange (:mod:`scheduler_core.transport`).

The response body is read (at most 64 KiB) only to pick an id or a result code out of its JSON;
it is never returned, stored or quoted in an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import requests

from scheduler_core.reach.base import Delivery
from scheduler_core.reach.providers._delivery import ambiguous, not_started, safe_error
from scheduler_core.transport import HttpRequest, HttpResult, exchange

BODY_LIMIT = 64 * 1024
USER_AGENT = "hai-scheduler-reach"


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
