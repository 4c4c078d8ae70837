"""Notification queue: a node SIGKILLed while sending, judged by a total-queue check.

Messages held by do-not-disturb are released to two node processes delivering to a real
webhook receiver on 127.0.0.1 (tests/helpers/http_server.py), half through an idempotent
provider (Idempotency-Key: the queue id) and half through a plain one. One node (whose
receiver never answers in time) is SIGKILLed while both have requests in flight (up to
``queue.concurrency``, default 4, each); this process then runs rounds (as a third node) until
every message is settled. At the receiver, nothing may be lost:

- every message ends ``sent``, ``dead`` or ``unknown`` -- never still pending, never gone;
- a ``sent`` message reached the receiver; a plain one exactly once;
- more than one request for a message only through the idempotent provider, every one with
  the message's key, so that the receiver, deduplicating by key, acted once;
- ``unknown`` only for the plain provider (a request that may or may not have been acted on),
  which the receiver saw at most once; no request for a message that is not in the queue.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from scheduler_core.reach import Reach
from scheduler_core.testing import OFFSET_ENV, clock_offset, set_clock_offset
from tests.conftest import TestDatabase
from tests.helpers.fault_cluster import stop_nodes, wait_for
from tests.helpers.http_server import RecordedRequest, RecordingServer
from tests.helpers.processes import HELPERS

pytestmark = pytest.mark.slow
HOUR_MS = 3_600_000
MESSAGES = 64  # with 4 senders a node, one node alone takes several seconds: both are sending
SETTLED = ("sent", "dead", "unknown")


def _dnd_now() -> dict[str, Any]:
    """A do-not-disturb window around the present (UTC): sends are queued."""
    now = time.gmtime()
    return {"enabled": True, "strategy": "delay", "timezone": "UTC",
            "start": f"{(now.tm_hour - 1) % 24:02d}:{now.tm_min:02d}",
            "end": f"{(now.tm_hour + 1) % 24:02d}:{now.tm_min:02d}"}


def _spawn(database: TestDatabase, engine: Engine, node_id: str, ready: Path,
           config: dict[str, Any]) -> subprocess.Popen[str]:
    """tests/helpers/reach_node.py, two hours later in DB time than ``engine`` (after the window)."""
    later = str(clock_offset(engine) + 2 * HOUR_MS)
    return subprocess.Popen([sys.executable, str(HELPERS / "reach_node.py"), database.url, node_id, str(ready),
                             json.dumps(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, OFFSET_ENV: later})


def _labelled(config: dict[str, Any], node: str) -> dict[str, Any]:
    """``config`` with every provider URL labelled by the node that sends (``?from=node``)."""
    return {**config, "providers": [{**p, "url": f"{p['url']}?from={node}"} for p in config["providers"]]}


def _both_sending(receiver: RecordingServer) -> bool:
    """Each node has a request in the middle of its slow answer (a node sends up to
    ``queue.concurrency`` at once; the label in the path says whose a request is)."""
    waiting = [r for r in list(receiver.requests) if r.outcome is None]
    time.sleep(0.03)  # not ones that were just being answered
    still = [r for r in waiting if r.outcome is None]
    return all(any(r.path.endswith(f"from={node}") for r in still) for node in ("doomed", "steady"))


def total_queue_check(statuses: Mapping[str, str | None], sent_bodies: Mapping[str, tuple[str, bool]],
                      requests: list[RecordedRequest]) -> list[str]:
    """Every violation of the rules above.

    ``statuses``: queue id -> status (None: the entry is gone); ``sent_bodies``: body ->
    (queue id, whether its provider is idempotent); ``requests``: what the receiver got.
    """
    problems = []
    received: dict[str, list[RecordedRequest]] = defaultdict(list)
    for request in requests:
        body = request.json().get("body")
        if body not in sent_bodies:
            problems.append(f"the receiver got a message nobody queued: {body!r}")
        received[body].append(request)
    for body, (queue_id, idempotent) in sent_bodies.items():
        status, got = statuses.get(queue_id), received.get(body, [])
        if status is None:
            problems.append(f"lost: queue entry {queue_id} ({body!r}) is gone")
            continue
        if status not in SETTLED:
            problems.append(f"unsettled: {queue_id} ({body!r}) is {status} after recovery")
        if status == "sent" and not got:
            problems.append(f"lost: {queue_id} ({body!r}) is sent but the receiver never saw it")
        if status == "unknown" and idempotent:
            problems.append(f"{queue_id} ({body!r}) went through an idempotent provider but is unknown")
        if len(got) > 1 and not idempotent:
            problems.append(f"duplicate: the plain provider delivered {body!r} {len(got)} times")
        keys = {r.header("Idempotency-Key") for r in got}
        if idempotent and got and keys != {queue_id}:
            problems.append(f"{body!r} carried keys {sorted(map(str, keys))}, not its queue id {queue_id}: "
                            "the receiver cannot deduplicate it")
    return problems


def _request(body: str, key: str | None = None) -> RecordedRequest:
    headers = [("Idempotency-Key", key)] if key else []
    return RecordedRequest("POST", "/", headers, json.dumps({"body": body}).encode(),
                           {name.lower(): value for name, value in headers}, "answered")


def test_the_total_queue_check_catches_every_kind_of_loss() -> None:
    bodies = {"a": ("q-a", False), "b": ("q-b", True), "c": ("q-c", False), "d": ("q-d", True)}
    fine = {"q-a": "sent", "q-b": "sent", "q-c": "unknown", "q-d": "dead"}
    requests = [_request("a"), _request("b", "q-b"), _request("b", "q-b")]  # b retried with its key
    assert total_queue_check(fine, bodies, requests) == []
    problems = total_queue_check({**fine, "q-a": None, "q-c": "sending", "q-d": "sent"}, bodies,
                                 [_request("a"), _request("a"), _request("b", "other"), _request("zzz")])
    assert problems == [
        "the receiver got a message nobody queued: 'zzz'",
        "lost: queue entry q-a ('a') is gone",
        "'b' carried keys ['other'], not its queue id q-b: the receiver cannot deduplicate it",
        "unsettled: q-c ('c') is sending after recovery",
        "lost: q-d ('d') is sent but the receiver never saw it",
    ], problems
    doubled = total_queue_check(fine, bodies, [*requests, _request("a")])
    assert doubled == ["duplicate: the plain provider delivered 'a' 2 times"]


def test_a_node_killed_while_sending_loses_no_message(database: TestDatabase, engine: Engine,
                                                      tmp_path: Path) -> None:
    with RecordingServer() as receiver:
        config = {"providers": [
            {"name": "idem", "type": "api", "url": receiver.url("/slow/0.6"), "idempotent": True},
            {"name": "plain", "type": "api", "url": receiver.url("/slow/0.6")}],
            "dnd": _dnd_now(),
            "queue": {"lease_ms": 1000, "retry_delay_ms": 1000, "max_retry_delay_ms": 1000, "max_attempts": 5}}
        reach = Reach(engine, config, node_id="sender")
        reach.init()
        bodies: dict[str, tuple[str, bool]] = {}
        for i in range(MESSAGES):
            provider = "idem" if i % 2 else "plain"
            result = reach.send({"provider": provider, "to": f"user-{i}", "body": f"message {i}"})
            assert result.deferred and result.queue_id
            bodies[f"message {i}"] = (result.queue_id, provider == "idem")
        assert receiver.requests == []

        ready = tmp_path / "ready"
        # The doomed node's answers never come before its kill (a 0.6 s answer could come between
        # seeing it pending and the SIGKILL on a loaded host, and then nothing was cut off).
        hanging = {**config, "providers": [{**p, "url": receiver.url("/slow/30")} for p in config["providers"]]}
        procs = [_spawn(database, engine, "doomed", ready, _labelled(hanging, "doomed")),
                 _spawn(database, engine, "steady", ready, _labelled(config, "steady"))]
        try:
            wait_for(lambda: len(receiver.requests) >= 4 and _both_sending(receiver), "both nodes to be sending", procs)
            procs[0].send_signal(signal.SIGKILL)
            procs[0].communicate(timeout=30)
            set_clock_offset(engine, clock_offset(engine) + 2 * HOUR_MS)  # the test's engine: after the window too

            def drained() -> bool:
                time.sleep(0.5)  # leases (1 s) of the dead node and backoffs (1 s) run out
                reach.run_round()
                return all((e := reach.queue.get(q)) is not None and e.status in SETTLED for q, _ in bodies.values())

            wait_for(drained, "every message to be settled", procs[1:], timeout=90)
        finally:
            stop_nodes(procs)
        time.sleep(0.5)  # a late duplicate would show up now

        statuses = {q: (e.status if (e := reach.queue.get(q)) is not None else None) for q, _ in bodies.values()}
        assert total_queue_check(statuses, bodies, list(receiver.requests)) == []
        cut_off = [r.json()["body"] for r in receiver.requests if str(r.outcome).startswith("client gone")
                   and r.path.endswith("from=doomed")]
        assert cut_off, "no request was cut off by the kill: the test did not test a crash while sending"
        for body in cut_off:  # the interrupted delivery was retried with its key, or left for a person
            queue_id, idempotent = bodies[body]
            entry = reach.queue.get(queue_id)
            assert entry is not None and entry.status == ("sent" if idempotent else "unknown"), (body, entry)
