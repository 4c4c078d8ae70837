"""Dead letters keep the real last failure (migration 0012): the class of the last attempt and
a short masked message, also when the letter died of ``attempts_exhausted``. On every database,
against a real HTTP server and a real refused SMTP connection."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from scheduler_core.reach import Reach
from scheduler_core.reach.queue import LAST_ERROR_MAX, last_error
from scheduler_core.store.reach_queue import QueueRepository
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.helpers.http_server import RecordingServer

HOUR_MS = 3_600_000


@pytest.fixture
def receiver() -> Iterator[RecordingServer]:
    with RecordingServer() as server:
        yield server


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nothing listens there once the socket is closed


def _reach(engine: Engine, receiver: RecordingServer, port: int) -> Reach:
    config: dict[str, Any] = {
        "providers": [
            {"name": "hook", "type": "api", "url": f"http://robot:url-pass-4711@127.0.0.1:{receiver.port}/status/500",
             "idempotent": True},
            {"name": "mail", "type": "smtp", "host": "127.0.0.1", "port": port, "tls": "none",
             "username": "robot", "password": "smtp-pass-4711", "from": "robot@example.com"},
        ],
        "queue": {"retry_delay_ms": 1_000, "max_retry_delay_ms": 4_000, "max_attempts": 2},
    }
    reach = Reach(engine, config, node_id="cause-test")
    reach.init()
    return reach


def _deliver_until_dead(engine: Engine, reach: Reach, queue_id: str) -> Any:
    for _ in range(2):
        set_clock_offset(engine, clock_offset(engine) + HOUR_MS)  # past any backoff
        reach.run_round()
    entry = reach.queue.get(queue_id)
    assert entry is not None and entry.status == "dead", entry
    return entry


def test_a_dead_letter_says_what_went_wrong(engine: Engine, receiver: RecordingServer) -> None:
    reach = _reach(engine, receiver, _closed_port())
    try:
        queued = {}
        for name in ("hook", "mail"):
            queued[name] = str(uuid.uuid4())
            QueueRepository(engine, "test", 60_000).enqueue(queued[name], name, None, "ops@example.com", "S", "body",
                                                            {}, (2, 1_000, 4_000), None)
        http = _deliver_until_dead(engine, reach, queued["hook"])
        assert http.last_failure == "attempts_exhausted"  # the class the queue acted on, as before
        assert http.last_error == "transient_failure: HTTP 500 Internal Server Error"  # and the real cause
        smtp = _deliver_until_dead(engine, reach, queued["mail"])
        assert smtp.last_failure == "attempts_exhausted"
        assert smtp.last_error.startswith("provider_unavailable: cannot connect: ConnectionRefusedError")
        for entry in (http, smtp):
            assert "4711" not in entry.last_error and "ops@example.com" not in entry.last_error
        requeued = reach.queue.requeue_dead(queued["hook"], http.updated_at)
        assert requeued.last_failure is None and requeued.last_error is None  # a fresh start
    finally:
        reach.close()


def test_the_message_is_masked_and_short() -> None:
    text = last_error("transient_failure", "POST https://bob:hunter2@api.example/x?token=abc failed; password=pw123 "
                      "Authorization: Bearer sk-live-123456")
    assert "hunter2" not in text and "pw123" not in text and "sk-live-123456" not in text and "abc" not in text
    assert text.startswith("transient_failure: POST https://bob:***@api.example/x")
    assert last_error("invalid_message", None) == "invalid_message"
    assert len(last_error("transient_failure", "x" * 5_000)) == LAST_ERROR_MAX
