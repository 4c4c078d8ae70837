"""A real threaded HTTP server on 127.0.0.1 that records what it receives (for executor tests).

Behaviour is chosen by the path:

* ``/ok``: 200 ``{"ok": true}`` (JSON); ``/text``: 200 ``hello`` (text/plain)
* ``/status/<code>``: that status with a short JSON body
* ``/slow/<seconds>``: answers ``/ok`` after ``seconds`` (earlier if the client goes away)
* ``/trickle/<n>``: headers with ``Content-Length: n``, then one byte per second
* ``/huge/<n>``: an ``n``-byte ``application/octet-stream`` body of ``x``
* ``/drop``: reads the request, then closes the connection without answering
* ``/echo``: 200 with the request's JSON body echoed

A query string never changes the behaviour: it labels requests (e.g. by sender) in ``path``.

Every handler that waits also watches the server's stop flag and whether the client is still
there, so that closing the server never waits for a sleeping handler. Handler threads are named
``recording-server`` so tests can tell them from threads that leaked.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

THREAD_NAME = "recording-server"


@dataclass
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    header_items: list[tuple[str, str]]  # as sent, in order, duplicates kept
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)  # lower-cased name -> last value
    outcome: str | None = None  # how answering ended: "answered", "client gone", ... (set last)
    received_at: float = field(default_factory=time.monotonic)  # when the request was read

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def count(self, name: str) -> int:
        """How many times a header was sent, whatever the case of its name."""
        return sum(1 for sent, _ in self.header_items if sent.lower() == name.lower())

    def json(self) -> Any:
        return json.loads(self.body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, owner: RecordingServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(target=self.process_request_thread, args=(request, client_address),
                                  name=THREAD_NAME, daemon=True)
        self.owner._track(thread)
        thread.start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that hang up are what these tests are about; no tracebacks on stderr


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET

    # --- plumbing -----------------------------------------------------------

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        recorded = RecordedRequest(self.command, self.path, list(self.headers.items()), body,
                                   {name.lower(): value for name, value in self.headers.items()})
        self.server.owner.requests.append(recorded)
        self.close_connection = True
        route, _, argument = self.path.partition("?")[0].lstrip("/").partition("/")  # a query only labels
        action = self._routes().get(route, self._not_found)
        try:
            recorded.outcome = action(argument, recorded) or "answered"
        except OSError as exc:  # the client went away while we wrote
            recorded.outcome = f"client gone ({type(exc).__name__})"

    def _routes(self) -> dict[str, Callable[[str, RecordedRequest], str | None]]:
        return {"ok": self._ok, "text": self._text, "status": self._status, "slow": self._slow,
                "trickle": self._trickle, "huge": self._huge, "drop": self._drop, "echo": self._echo}

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _answer_json(self, status: int, value: Any) -> None:
        self._answer(status, json.dumps(value).encode(), "application/json")

    def _wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; False as soon as the server stops or the client hangs up."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.server.owner.stopping.is_set() or self._client_gone(min(left, 0.05)):
                return False
        return True

    def _client_gone(self, timeout: float) -> bool:
        readable, _, _ = select.select([self.connection], [], [], timeout)
        if not readable:
            return False
        try:
            peeked: bytes = self.connection.recv(1, socket.MSG_PEEK)
        except OSError:
            return True
        return peeked == b""

    # --- routes -------------------------------------------------------------

    def _ok(self, argument: str, recorded: RecordedRequest) -> None:
        self._answer_json(200, {"ok": True})

    def _text(self, argument: str, recorded: RecordedRequest) -> None:
        self._answer(200, b"hello", "text/plain; charset=utf-8")

    def _status(self, argument: str, recorded: RecordedRequest) -> None:
        self._answer_json(int(argument), {"status": int(argument)})

    def _slow(self, argument: str, recorded: RecordedRequest) -> str | None:
        if not self._wait(float(argument)):
            return "client gone while waiting"
        self._answer_json(200, {"ok": True, "slept": float(argument)})
        return None

    def _trickle(self, argument: str, recorded: RecordedRequest) -> str | None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", argument)
        self.end_headers()
        self.wfile.flush()
        for _ in range(int(argument)):
            if not self._wait(1.0):
                return "client gone while trickling"
            self.wfile.write(b"x")
            self.wfile.flush()
        return None

    def _huge(self, argument: str, recorded: RecordedRequest) -> None:
        size = int(argument)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        chunk = b"x" * 65536
        while size > 0:
            self.wfile.write(chunk[:size])
            size -= min(size, len(chunk))
        self.wfile.flush()

    def _drop(self, argument: str, recorded: RecordedRequest) -> str:
        self.connection.shutdown(socket.SHUT_RDWR)
        return "dropped"

    def _echo(self, argument: str, recorded: RecordedRequest) -> None:
        self._answer(200, recorded.body or b"null", "application/json")

    def _not_found(self, argument: str, recorded: RecordedRequest) -> None:
        self._answer_json(404, {"error": "no such route"})


class RecordingServer:
    """The server, serving from a background thread until :meth:`close` (or the ``with`` block ends)."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._server = _Server(self)
        self.port: int = self._server.server_address[1]
        self._serving = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                         name=THREAD_NAME, daemon=True)
        self._serving.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def _track(self, thread: threading.Thread) -> None:
        with self._lock:
            self._threads = [known for known in self._threads if known.is_alive()]
            self._threads.append(thread)

    def wait_for_outcome(self, index: int = -1, timeout: float = 2.0) -> str | None:
        """The outcome of a recorded request once its handler finished (None if it did not in time)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.requests and self.requests[index].outcome is not None:
                return self.requests[index].outcome
            time.sleep(0.01)
        return None

    def close(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._serving.join(timeout=2)
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=1)

    def __enter__(self) -> RecordingServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
