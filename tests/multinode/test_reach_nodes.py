"""Notification rounds in separate node processes: DND release exactly once, and crashes
while sending (idempotent webhook recovered with the same key; SMTP isolated as unknown)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from scheduler_core.reach import Reach
from scheduler_core.testing import OFFSET_ENV, clock_offset, set_clock_offset
from tests.conftest import TestDatabase
from tests.helpers.http_server import RecordingServer
from tests.helpers.processes import HELPERS
from tests.helpers.smtp_server import SmtpServer

pytestmark = pytest.mark.slow
HOUR_MS = 3_600_000


def _window() -> dict[str, Any]:
    now = time.gmtime()
    return {"enabled": True, "strategy": "delay", "timezone": "UTC",
            "start": f"{(now.tm_hour - 1) % 24:02d}:{now.tm_min:02d}",
            "end": f"{(now.tm_hour + 1) % 24:02d}:{now.tm_min:02d}"}


def _spawn(database: TestDatabase, node_id: str, ready: Path, config: dict[str, Any],
           offset_ms: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(HELPERS / "reach_node.py"), database.url, node_id, str(ready),
                             json.dumps(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, OFFSET_ENV: str(offset_ms)})


def _wait(predicate: Any, procs: list[subprocess.Popen[str]], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        for proc in procs:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode in (0, -signal.SIGKILL), err[-3000:]


def test_dnd_release_is_delivered_exactly_once_by_two_nodes(database: TestDatabase, engine: Engine,
                                                            tmp_path: Path) -> None:
    receiver = RecordingServer()
    try:
        config = {"providers": [{"name": "hook", "type": "api", "url": receiver.url("/ok")}], "dnd": _window()}
        reach = Reach(engine, config, node_id="sender")
        reach.init()
        queue_ids = [reach.send({"provider": "hook", "to": f"user-{i}", "body": f"message {i}"}).queue_id
                     for i in range(30)]
        assert all(queue_ids) and receiver.requests == []
        ready = tmp_path / "ready"
        procs = [_spawn(database, f"node-{i}", ready, config, 2 * HOUR_MS) for i in range(2)]
        try:
            _wait(lambda: len(receiver.requests) >= 30 and all(
                (e := reach.queue.get(q)) is not None and e.status == "sent" for q in queue_ids if q), procs, 90)
            time.sleep(1.5)  # a late duplicate would show up now
        finally:
            _stop(procs)
        bodies = Counter(r.json()["body"] for r in receiver.requests)
        assert bodies == Counter(f"message {i}" for i in range(30))  # each exactly once
    finally:
        receiver.close()


def _kill_while_sending(database: TestDatabase, tmp_path: Path, config: dict[str, Any],
                        started: Any) -> None:
    ready = tmp_path / "ready"
    proc = _spawn(database, "doomed", ready, config, 2 * HOUR_MS)
    try:
        _wait(started, [proc], 60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)


def test_sigkill_during_idempotent_webhook_delivery_is_retried_with_the_same_key(
        database: TestDatabase, engine: Engine, tmp_path: Path) -> None:
    receiver = RecordingServer()
    try:
        config = {"providers": [{"name": "hook", "type": "api", "url": receiver.url("/slow/4"), "idempotent": True}],
                  "dnd": _window(), "queue": {"lease_ms": 1_000, "retry_delay_ms": 1_000}}
        reach = Reach(engine, config, node_id="survivor")
        reach.init()
        queue_id = reach.send({"provider": "hook", "to": "user-1", "body": "pay"}).queue_id
        _kill_while_sending(database, tmp_path, config, lambda: len(receiver.requests) == 1)
        set_clock_offset(engine, clock_offset(engine) + 2 * HOUR_MS)
        time.sleep(1.2)  # the dead owner's 1 s lease runs out
        assert reach.run_round().recovered == 1
        time.sleep(1.1)  # the backoff
        report = reach.run_round()
        assert report.sent == 1
        assert [r.header("Idempotency-Key") for r in receiver.requests] == [queue_id, queue_id]
        entry = reach.queue.get(str(queue_id))
        assert entry is not None and (entry.status, entry.attempt_count) == ("sent", 2)
    finally:
        receiver.close()


def test_sigkill_during_smtp_delivery_becomes_unknown_until_resolved(
        database: TestDatabase, engine: Engine, tmp_path: Path) -> None:
    with SmtpServer() as smtp:
        smtp.delay_data(30)
        config = {"providers": [{"name": "mail", "type": "smtp", "host": "127.0.0.1", "port": smtp.port,
                                 "tls": "none", "from": "robot@example.com"}],
                  "dnd": _window(), "queue": {"lease_ms": 1_000}}
        reach = Reach(engine, config, node_id="survivor")
        reach.init()
        queue_id = str(reach.send({"provider": "mail", "to": "user@example.com", "body": "code 1"}).queue_id)
        _kill_while_sending(database, tmp_path, config, lambda: smtp.data_attempts >= 1)
        set_clock_offset(engine, clock_offset(engine) + 2 * HOUR_MS)
        time.sleep(1.2)
        assert reach.run_round().recovered == 1
        entry = reach.queue.get(queue_id)
        assert entry is not None and entry.status == "unknown"
        assert reach.run_round().claimed == 0  # never resent automatically
        assert [e.queue_id for e in reach.queue.list("unknown")] == [queue_id]
        resolved = reach.queue.resolve_unknown(queue_id, "discarded", resolved_by="operator")
        assert resolved.status == "discarded"
