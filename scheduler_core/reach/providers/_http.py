"""One HTTP request under one deadline, for the api and aliyun-sms providers.

The connections are the executor's watched ones (:mod:`scheduler_core.executors.http_watch`): each
socket is registered before it connects, and a connection counts as *established* once it is up
(after the TLS handshake for HTTPS). That flag, not a guess from exception types, decides whether
the request may have reached the server. A :class:`Watchdog` shuts the sockets down at the
deadline, so a slow or trickling server cannot hold the send past it.

The response body is read (at most 64 KiB) only to pick an id or a result code out of its JSON;
it is never returned, stored or quoted in an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import requests

from scheduler_core.executors.http_watch import Watch, WatchedAdapter
from scheduler_core.reach.base import Delivery
from scheduler_core.reach.providers._delivery import Watchdog, ambiguous, not_started, safe_error

BODY_LIMIT = 64 * 1024
_BACKSTOP_S = 0.25  # socket timeouts end a little after the watchdog's deadline, never before it


@dataclass(frozen=True)
class HttpAnswer:
    """What came back: a status (and the JSON body when it parsed), or why there is none."""

    status: int | None = None  # None: no complete answer
    data: Any = None  # the decoded JSON body when it was small and valid; for reading ids and codes only
    established: bool = False  # a connection was up: the request may have reached the server
    timed_out: bool = False  # the deadline ended the request
    error: str | None = None  # when status is None: what went wrong (no URL query, no secrets)


def _read_json(response: requests.Response) -> Any:
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_content(chunk_size=16 * 1024):
        size += len(chunk)
        if size > BODY_LIMIT:
            return None  # too big to be an answer we read anything from; stop reading
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (ValueError, RecursionError):  # ValueError includes UnicodeDecodeError
        return None


def _session(watch: Watch) -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # no proxy variables, no ~/.netrc: the request goes where the config says
    session.headers["User-Agent"] = "hai-scheduler-reach"
    adapter = WatchedAdapter(watch)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def exchange(method: str, url: str, *, timeout_ms: int, headers: Mapping[str, str] | None = None,
             json_body: Any = None, scrub: Iterable[str | None] = ()) -> HttpAnswer:
    """Send one request and read the answer, all within ``timeout_ms``. Never raises for network errors."""
    watch = Watch()
    session = _session(watch)
    try:
        with Watchdog(timeout_ms, watch.stop) as dog:
            try:
                response = session.request(method, url, headers=dict(headers or {}), json=json_body,
                                            timeout=timeout_ms / 1000 + _BACKSTOP_S, stream=True,
                                            allow_redirects=False)
            except Exception as exc:
                timed_out = dog.fired or isinstance(exc, requests.Timeout)
                return HttpAnswer(established=watch.established, timed_out=timed_out,
                                  error=safe_error(exc, scrub))
            try:
                return HttpAnswer(status=response.status_code, data=_read_json(response), established=True)
            except Exception as exc:  # the status arrived, the body did not (all of it)
                return HttpAnswer(status=response.status_code, established=True,
                                  timed_out=dog.fired or isinstance(exc, requests.Timeout),
                                  error=safe_error(exc, scrub))
            finally:
                response.close()
    finally:
        session.close()  # after the watchdog finished: it never shuts down a socket being closed


def no_answer(answer: HttpAnswer, budget_ms: int) -> Delivery:
    """No status: not connected means nothing was sent; anything later may have been delivered."""
    if not answer.established:
        if answer.timed_out:
            return not_started("provider_unavailable", f"timeout after {budget_ms} ms before connecting; not sent")
        return not_started("provider_unavailable", f"not connected: {answer.error}")
    if answer.timed_out:
        return ambiguous("transient_failure", f"timeout after {budget_ms} ms; the request may have been delivered")
    return ambiguous("transient_failure", f"connection lost after the request may have been sent: {answer.error}")
