"""A webhook receiver for notifications.py: a real HTTP server on 127.0.0.1 that records
every delivery (its ``Idempotency-Key``, its ``to`` and when it arrived) and answers 200.

Like a provider that promises idempotency, it deduplicates by key: the first request with a
key is an *effect*, a repeat is answered 200 again (with the same id) but has no effect. A
request without a key is always an effect. Lighter than tests/helpers/http_server.py: it keeps
no bodies, and it listens with a large backlog so that parallel senders are not refused.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Delivery:
    to: str
    key: str | None
    at: float  # time.time() on arrival (the host clock; the databases run on this host)
    effect: bool  # False for a repeat of a key already seen


@dataclass
class Tally:
    """What the receiver saw, summed up against the messages that were sent to it."""

    requests: int = 0
    messages: int = 0  # distinct recipients (one message each in the benchmark)
    raw_duplicates: int = 0  # requests beyond the first per message
    effect_duplicates: int = 0  # effects beyond the first per message (after deduplication by key)
    first_at: float | None = None
    last_at: float | None = None
    per_message: dict[str, int] = field(default_factory=dict)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512

    def __init__(self, owner: Receiver) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hangs up is not the receiver's problem


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        payload = json.loads(self.rfile.read(length) or b"{}")
        key = self.headers.get("Idempotency-Key")
        self.server.owner.record(str(payload.get("to")), key)
        if self.server.owner.answer_after_ms:
            time.sleep(self.server.owner.answer_after_ms / 1000)  # a provider's latency
        body = json.dumps({"id": key or f"r-{time.monotonic_ns()}"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Receiver:
    """Serves from a background thread until :meth:`close`."""

    def __init__(self, answer_after_ms: int = 0) -> None:
        self.answer_after_ms = answer_after_ms
        self.deliveries: list[Delivery] = []
        self._keys: set[str] = set()
        self._lock = threading.Lock()
        self._server = _Server(self)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/notify"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="bench-receiver", daemon=True)
        self._thread.start()

    def record(self, to: str, key: str | None) -> None:
        with self._lock:
            effect = key is None or key not in self._keys
            if key is not None:
                self._keys.add(key)
            self.deliveries.append(Delivery(to, key, time.time(), effect))

    def tally(self) -> Tally:
        with self._lock:
            seen = list(self.deliveries)
        tally = Tally(requests=len(seen))
        effects: dict[str, int] = {}
        for delivery in seen:
            tally.per_message[delivery.to] = tally.per_message.get(delivery.to, 0) + 1
            effects[delivery.to] = effects.get(delivery.to, 0) + int(delivery.effect)
        tally.messages = len(tally.per_message)
        tally.raw_duplicates = tally.requests - tally.messages
        tally.effect_duplicates = sum(max(0, n - 1) for n in effects.values())
        if seen:
            tally.first_at, tally.last_at = min(d.at for d in seen), max(d.at for d in seen)
        return tally

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2)
