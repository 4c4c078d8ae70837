"""A PagerDuty Events API v2 stand-in on 127.0.0.1 (``POST /v2/enqueue``), for the ``pagerduty`` provider.

It checks each event the way PagerDuty documents it -- its routing key, ``event_action``, a
``payload`` with a non-empty ``summary`` of at most 1024 characters, a ``source``, a ``severity``
of ``critical``/``error``/``warning``/``info``, a ``dedup_key`` of at most 255 characters, at most
512 KB -- and answers 400 ``{"status": "invalid event", ...}`` for one it would refuse. An accepted
trigger opens an alert, or is folded into the open alert of the same ``dedup_key`` (``alerts``
counts the triggers of each), and is answered 202 ``{"status": "success", "dedup_key": ...}``
(a generated key when the event had none).

A test scripts what goes wrong: ``answer_next(status, body, taken=...)`` answers the next request
so (after accepting its event when ``taken``: a 500 after PagerDuty took it); ``delay_s`` holds
every answer back after the event was taken, for a deadline that ends the request after sending.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

from tests.helpers.sms_api_server import JsonApiServer, ReceivedRequest

PATH = "/v2/enqueue"
SEVERITIES = ("critical", "error", "warning", "info")
EVENT_MAX_BYTES = 512 * 1024


class PagerDutyServer(JsonApiServer):
    """Events API v2 for one integration (``routing_key``); ``url()`` is its enqueue URL."""

    def __init__(self, routing_key: str) -> None:
        self.routing_key = routing_key
        self.alerts: dict[str, int] = {}  # dedup_key -> triggers accepted for that alert
        self.delay_s = 0.0
        self._scripted: list[tuple[int, Any, bool]] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        super().__init__()

    def url(self, path: str = PATH) -> str:
        return super().url(path)

    def answer_next(self, status: int, body: Any = None, *, taken: bool = False) -> None:
        """Answer the next request with ``status`` and ``body``; accept its event first when ``taken``."""
        self._scripted.append((status, body, taken))

    def events(self) -> list[Any]:
        return [received.json() for received in self.requests]

    def _problem(self, received: ReceivedRequest) -> str | None:
        """None when PagerDuty would take the event; else what it would say is wrong."""
        if received.method != "POST" or received.path != PATH:
            return "not the enqueue endpoint"
        if not received.headers.get("content-type", "").startswith("application/json"):
            return "the body must be JSON"
        if len(received.body) > EVENT_MAX_BYTES:
            return "the event is larger than 512 KB"
        try:
            event = json.loads(received.body)
        except ValueError:
            return "the body must be JSON"
        if not isinstance(event, dict) or event.get("routing_key") != self.routing_key:
            return "routing_key is invalid"
        if event.get("event_action") not in ("trigger", "acknowledge", "resolve"):
            return "event_action is invalid"
        dedup_key = event.get("dedup_key")
        if dedup_key is not None and (not isinstance(dedup_key, str) or not 1 <= len(dedup_key) <= 255):
            return "dedup_key is invalid"
        payload = event.get("payload")
        if not isinstance(payload, dict):
            return "payload is required"
        summary = payload.get("summary")
        if not isinstance(summary, str) or not summary.strip() or len(summary) > 1024:
            return "payload.summary is invalid"
        if not isinstance(payload.get("source"), str) or not payload["source"]:
            return "payload.source is required"
        if payload.get("severity") not in SEVERITIES:
            return "payload.severity is invalid"
        if not isinstance(payload.get("custom_details", {}), dict):
            return "payload.custom_details must be an object"
        return None

    def _take(self, received: ReceivedRequest) -> str:
        """Accept the event: a new alert, or one more trigger of the open alert with its dedup_key."""
        dedup_key = received.json().get("dedup_key") or uuid.uuid4().hex
        with self._lock:
            self.alerts[dedup_key] = self.alerts.get(dedup_key, 0) + 1
        return str(dedup_key)

    def respond(self, received: ReceivedRequest) -> tuple[int, Any]:
        problem = self._problem(received)
        if problem is not None:
            return 400, {"status": "invalid event", "message": "Event object is invalid", "errors": [problem]}
        if self._scripted:
            status, body, taken = self._scripted.pop(0)
            if taken:
                self._take(received)
            return status, body
        dedup_key = self._take(received)
        if self.delay_s:
            self._stopping.wait(self.delay_s)
        return 202, {"status": "success", "message": "Event processed", "dedup_key": dedup_key}

    def close(self) -> None:
        self._stopping.set()  # a handler holding its answer back ends now
        super().close()
