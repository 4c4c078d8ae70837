"""One HTTP request and its answer, under one deadline: connect, send and the whole body."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import requests

from scheduler_core.transport.connections import Watch, WatchedAdapter
from scheduler_core.transport.deadline import Cancellation, StopCause, Watchdog

WORKER_THREAD = "hai-scheduler-http"
CHUNK_BYTES = 16 * 1024
GRACE_S = 0.5  # how long a stopped exchange waits for its worker before returning anyway
BACKSTOP_S = 0.25  # socket timeouts end a little after the deadline, never before it


@dataclass(frozen=True)
class HttpRequest:
    """What to send: redirects are never followed, the node's environment is never consulted."""

    method: str
    url: str
    timeout_ms: int  # the one deadline: name resolution, connect, TLS, sending and reading the whole body
    body_limit: int  # a body over this many bytes is not kept (reading stops there)
    user_agent: str
    headers: Mapping[str, str] = field(default_factory=dict)  # they replace the User-Agent too
    json_body: Any = None  # None: no body


@dataclass(frozen=True)
class HttpResult:
    """How far one exchange got. The thread that waited for it decides what that means."""

    established: bool = False  # a connection was up: the request may have reached the server
    status: int | None = None  # None: no status line arrived
    reason: str = ""  # the server's reason phrase
    body: bytes | None = None  # the whole body; None when it was not read completely
    over_limit: bool = False  # more than body_limit bytes arrived
    error: BaseException | None = None  # what the request or the body read raised
    stopped: StopCause | None = None  # the deadline or the cancellation ended the exchange first


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception under requests' and urllib3's wrappers (a socket or TLS error)."""
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


def _read_body(response: requests.Response, limit: int) -> bytes | None:
    """The whole body, or None as soon as more than ``limit`` bytes arrived (reading stops there)."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_content(chunk_size=CHUNK_BYTES):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _session(request: HttpRequest, watch: Watch) -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # no proxy variables, no ~/.netrc, no CA bundle variables
    session.headers["User-Agent"] = request.user_agent
    adapter = WatchedAdapter(watch)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _answer(request: HttpRequest, response: requests.Response) -> HttpResult:
    answered = HttpResult(established=True, status=response.status_code, reason=response.reason or "")
    try:
        body = _read_body(response, request.body_limit)
    except Exception as exc:  # the status arrived, the body did not (all of it)
        return dataclasses.replace(answered, error=exc)
    return dataclasses.replace(answered, body=body, over_limit=body is None)


def _work(request: HttpRequest, watch: Watch, results: list[HttpResult]) -> None:
    """The worker: one request on a session of its own, closed once it is done with the network."""
    session: requests.Session | None = None
    response: requests.Response | None = None
    try:
        session = _session(request, watch)
        # The watchdog is the deadline; the socket timeout is a backstop. A 3xx is an answer like any
        # other: following it would send our headers (and credentials) somewhere the caller did not name.
        response = session.request(request.method, request.url, headers=dict(request.headers),
                                   json=request.json_body, timeout=request.timeout_ms / 1000 + BACKSTOP_S,
                                   stream=True, allow_redirects=False)
        results.append(_answer(request, response))
    except BaseException as exc:  # whatever it is, the caller must not be left waiting
        results.append(HttpResult(established=watch.established, error=exc))
    finally:
        watch.finish()  # before closing: the watchdog never shuts down a socket being closed
        if response is not None:
            response.close()
        if session is not None:
            session.close()


def exchange(request: HttpRequest, signal: Cancellation | None = None) -> HttpResult:
    """Send ``request`` and read the answer within its deadline, or until ``signal`` is set. Never raises.

    The request runs in a worker thread; at the deadline (or on cancellation) the watchdog shuts
    its sockets down, so a blocked connect, send or read fails at once. Name resolution and a TLS
    handshake cannot be interrupted: this still returns on time (after a short grace for the
    worker), and the worker, refused any further socket, ends on its own without sending.
    """
    watch = Watch()
    results: list[HttpResult] = []
    worker = threading.Thread(target=_work, args=(request, watch, results), name=WORKER_THREAD, daemon=True)
    with Watchdog(request.timeout_ms, watch.stop, signal):
        worker.start()
        watch.settled.wait()
    if watch.stopped_by is None:  # the worker finished first: its result stands
        worker.join()  # it is only closing its session
        return results[0]
    worker.join(GRACE_S)
    finished = results[0] if results else HttpResult(established=watch.established)
    return dataclasses.replace(finished, stopped=watch.stopped_by)
