"""SQL per notification delivery on every database: a backlog is claimed and settled in waves
(one claim, one mark-sending, one settle per ``queue.concurrency`` rows) on one connection held
for the round, at most 3 statements a delivery with the default of 4 senders, every message
delivered exactly once."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine

from scheduler_core.reach import Reach
from scheduler_core.reach.queue import RoundReport
from scheduler_core.store.reach_queue import QueueRepository
from tests.helpers.http_server import RecordingServer
from tests.helpers.statements import counting

MESSAGES = 40
STATEMENTS_PER_DELIVERY = 3


@pytest.fixture
def receiver() -> Iterator[RecordingServer]:
    server = RecordingServer()
    yield server
    server.close()


def _backlog(engine: Engine, receiver: RecordingServer, idempotent: bool,
             concurrency: int | None = None) -> tuple[Reach, list[str]]:
    queue: dict[str, int] = {} if concurrency is None else {"concurrency": concurrency}
    reach = Reach(engine, {"providers": [{"name": "hook", "type": "api", "url": receiver.url("/ok"),
                                          "idempotent": idempotent}], "queue": queue}, node_id="node-a")
    reach.init()
    repo = QueueRepository(engine, "sender", 30_000)
    due_at = repo.now()
    ids = []
    for i in range(MESSAGES):
        queue_id = str(uuid.uuid4())
        repo.enqueue(queue_id, "hook", None, f"user-{i:03d}", "Subject", f"body {i}", {}, (3, 1_000, 4_000), due_at)
        ids.append(queue_id)
    return reach, ids


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "non-idempotent"])
def test_a_backlog_is_delivered_at_most_three_statements_a_delivery(engine: Engine, receiver: RecordingServer,
                                                                    idempotent: bool) -> None:
    reach, ids = _backlog(engine, receiver, idempotent)
    with counting(engine) as sql:
        report = reach.run_round()
    assert report == RoundReport(claimed=MESSAGES, sent=MESSAGES)
    recipients = Counter(request.json()["to"] for request in receiver.requests)
    assert recipients == Counter({f"user-{i:03d}": 1 for i in range(MESSAGES)})  # each exactly once
    if idempotent:
        assert sorted(request.header("Idempotency-Key") for request in receiver.requests) == sorted(ids)
    assert {entry.status for entry in (reach.queue.get(queue_id) for queue_id in ids) if entry} == {"sent"}
    assert sql.statements <= STATEMENTS_PER_DELIVERY * MESSAGES, (
        f"{sql.statements / MESSAGES:.2f} statements per delivery ({sql.statements} for {MESSAGES})")
    assert sql.transactions <= MESSAGES  # three write transactions a wave of 4, and a round's few reads
    # the round's writes share one held connection: a few check-outs a round, not three a wave
    assert sql.checkouts <= 6, f"{sql.checkouts} pool check-outs for one round"


def test_one_sender_still_delivers_each_message_once(engine: Engine, receiver: RecordingServer) -> None:
    """Waves of one row (``queue.concurrency`` 1): more SQL per delivery, the same outcome."""
    reach, _ = _backlog(engine, receiver, False, concurrency=1)
    assert reach.run_round() == RoundReport(claimed=MESSAGES, sent=MESSAGES)
    assert len(receiver.requests) == MESSAGES
    assert sorted(request.json()["to"] for request in receiver.requests) == [f"user-{i:03d}" for i in range(MESSAGES)]
