"""Reach end to end on every database: direct and template sends, DND discard/delay, rounds."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig
from scheduler_core.access import Scope
from scheduler_core.db import close_engine, create_engine
from scheduler_core.errors import (
    DatabaseError,
    DndBlockedError,
    InitFailedError,
    InvalidRecipientError,
    ProviderNotFoundError,
    ReachConfigError,
    SendFailedError,
    TemplateRenderFailedError,
)
from scheduler_core.reach import Reach
from scheduler_core.reach.queue import RoundReport
from scheduler_core.store.reach_queue import QueueRepository
from scheduler_core.store.teams import TeamRepository
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.conftest import TestDatabase
from tests.helpers.http_server import RecordingServer
from tests.helpers.smtp_server import SmtpServer

HOUR_MS = 3_600_000


@pytest.fixture
def receiver() -> Iterator[RecordingServer]:
    server = RecordingServer()
    yield server
    server.close()


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    with SmtpServer() as server:
        yield server


def _window_around_now() -> dict[str, Any]:
    """A DND window (UTC) from one hour ago to one hour ahead."""
    now = time.gmtime()
    start = f"{(now.tm_hour - 1) % 24:02d}:{now.tm_min:02d}"
    end = f"{(now.tm_hour + 1) % 24:02d}:{now.tm_min:02d}"
    return {"enabled": True, "start": start, "end": end, "timezone": "UTC"}


def _config(receiver: RecordingServer, smtp: SmtpServer | None = None, dnd: dict[str, Any] | None = None,
            idempotent: bool = False, path: str = "/ok") -> dict[str, Any]:
    providers: list[dict[str, Any]] = [
        {"name": "hook", "type": "api", "url": receiver.url(path), "idempotent": idempotent},
        {"name": "log", "type": "console"},
    ]
    if smtp is not None:
        providers.append({"name": "mail", "type": "smtp", "host": "127.0.0.1", "port": smtp.port, "tls": "none",
                          "from": "robot@example.com"})
    return {"providers": providers,
            "templates": [{"name": "otp", "provider": "mail" if smtp else "hook", "subject": "Code {code}",
                           "body": "Your code is {code}; valid {minutes} minutes."}],
            "dnd": dnd or {}, "queue": {"retry_delay_ms": 1_000, "max_retry_delay_ms": 4_000, "max_attempts": 3}}


def _reach(engine: Engine | None, config: dict[str, Any]) -> Reach:
    reach = Reach(engine, config, node_id="test-node")
    reach.init()
    return reach


def test_direct_and_template_sends(engine: Engine, receiver: RecordingServer, smtp: SmtpServer) -> None:
    reach = _reach(engine, _config(receiver, smtp))
    result = reach.send({"provider": "log", "to": "ops@example.com", "body": "hello"})
    assert (result.provider, result.deferred, result.queue_id) == ("log", False, None) and result.message_id
    mailed = reach.send({"template": "otp", "to": "user@example.com", "vars": {"code": "123456", "minutes": 5}})
    assert mailed.provider == "mail" and not mailed.deferred
    [mail] = smtp.messages
    assert mail.message["Subject"] == "Code 123456"
    assert "Your code is 123456; valid 5 minutes." in mail.body
    hooked = reach.send({"template": "otp", "provider": "hook", "to": "user-42", "vars": {"code": "1", "minutes": 1}})
    assert hooked.provider == "hook" and receiver.requests[-1].json()["body"] == "Your code is 1; valid 1 minutes."
    with pytest.raises(TemplateRenderFailedError):
        reach.send({"template": "otp", "to": "user@example.com", "vars": {"code": "1"}})
    with pytest.raises(ProviderNotFoundError):
        reach.send({"provider": "fax", "to": "x", "body": "b"})
    with pytest.raises(InvalidRecipientError):
        reach.send({"provider": "mail", "to": "not an address", "body": "b"})
    with pytest.raises(ReachConfigError) as info:
        reach.send({"provider": "log", "to": "x", "body": "b", "cc": "y"})
    assert info.value.field == "cc"


def test_failed_immediate_delivery_raises(engine: Engine, receiver: RecordingServer) -> None:
    reach = _reach(engine, _config(receiver, path="/status/503"))
    with pytest.raises(SendFailedError) as info:
        reach.send({"provider": "hook", "to": "u", "body": "b"})
    assert info.value.details["failure_class"] == "transient_failure"


def test_dnd_discard(engine: Engine, receiver: RecordingServer) -> None:
    reach = _reach(engine, _config(receiver, dnd={**_window_around_now(), "strategy": "discard"}))
    with pytest.raises(DndBlockedError):
        reach.send({"provider": "hook", "to": "u", "body": "b"})
    assert receiver.requests == []


def test_dnd_delay_needs_the_database(receiver: RecordingServer) -> None:
    with pytest.raises(ReachConfigError) as info:
        _reach(None, _config(receiver, dnd={**_window_around_now(), "strategy": "delay"}))
    assert info.value.field == "dnd.strategy"


def test_dnd_delay_queues_then_delivers_once_after_the_window(engine: Engine, receiver: RecordingServer) -> None:
    reach = _reach(engine, _config(receiver, dnd={**_window_around_now(), "strategy": "delay"}, idempotent=True))
    result = reach.send({"provider": "hook", "to": "user-7", "body": "held"})
    assert result.deferred and result.queue_id and result.message_id is None
    entry = reach.queue.get(result.queue_id)
    assert entry is not None and entry.status == "pending" and entry.next_attempt_at > reach._now()
    assert reach.run_round().claimed == 0 and receiver.requests == []  # still inside the window
    set_clock_offset(engine, clock_offset(engine) + 2 * HOUR_MS)  # the window is over
    report = reach.run_round()
    assert (report.claimed, report.sent) == (1, 1)
    assert reach.run_round().claimed == 0
    [request] = receiver.requests
    assert request.header("Idempotency-Key") == result.queue_id
    assert request.json()["idempotencyKey"] == result.queue_id and request.json()["body"] == "held"
    done = reach.queue.get(result.queue_id)
    assert done is not None and done.status == "sent" and done.message_id


def test_queueing_failure_is_an_error_not_a_fake_success(engine: Engine, receiver: RecordingServer) -> None:
    reach = _reach(engine, _config(receiver, dnd={**_window_around_now(), "strategy": "delay"}))
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE reach_queue RENAME TO reach_queue_away"))
    try:
        with pytest.raises(SendFailedError, match="could not be queued"):
            reach.send({"provider": "hook", "to": "u", "body": "b"})
    finally:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE reach_queue_away RENAME TO reach_queue"))


@pytest.mark.parametrize(("idempotent", "expected"), [(False, ["unknown"]), (True, ["pending", "pending", "dead"])])
def test_failing_deliveries(engine: Engine, receiver: RecordingServer, idempotent: bool,
                            expected: list[str]) -> None:
    reach = _reach(engine, _config(receiver, dnd={**_window_around_now(), "strategy": "delay"},
                                   idempotent=idempotent, path="/status/503"))
    queue_id = reach.send({"provider": "hook", "to": "u", "body": "b"}).queue_id
    assert queue_id is not None
    seen = []
    for step in range(len(expected)):
        set_clock_offset(engine, clock_offset(engine) + 2 * HOUR_MS)  # past the window and any backoff
        reach.run_round()
        entry = reach.queue.get(queue_id)
        assert entry is not None
        seen.append(entry.status)
        assert entry.attempt_count == step + 1
    assert seen == expected
    final = reach.queue.get(queue_id)
    assert final is not None
    assert final.last_failure == ("attempts_exhausted" if idempotent else "transient_failure")
    assert [e.queue_id for e in reach.queue.list(final.status)] == [queue_id]
    assert len(receiver.requests) == len(expected)
    if idempotent:  # every try carried the same key
        assert {r.header("Idempotency-Key") for r in receiver.requests} == {queue_id}


def test_stored_templates_crud_and_preview(engine: Engine, receiver: RecordingServer) -> None:
    from scheduler_core.errors import TemplateNotFoundError

    reach = _reach(engine, _config(receiver))
    reach.templates.save("welcome", "hook", "Hello {name}", subject="Hi {name}")
    assert reach.templates.preview("welcome", {"name": "Ada"}) == ("Hi Ada", "Hello Ada")
    with pytest.raises(TemplateRenderFailedError):
        reach.templates.preview("welcome", {})
    reach.send({"template": "welcome", "to": "user-1", "vars": {"name": "Ada"}})
    assert receiver.requests[-1].json()["body"] == "Hello Ada"
    reach.templates.save("welcome", "hook", "Hello again {name}")
    assert [t.body for t in reach.templates.list()] == ["Hello again {name}"]
    with pytest.raises(ReachConfigError) as info:
        reach.templates.save("other", "fax", "x")
    assert info.value.field == "provider"
    reach.templates.delete("welcome")
    with pytest.raises(TemplateNotFoundError):
        reach.templates.get("welcome")


def test_a_backlog_drains_in_back_to_back_rounds_of_at_most_100(engine: Engine, receiver: RecordingServer) -> None:
    """250 messages held by do-not-disturb: the minute's round is full, so further rounds follow
    at once (each still at most 100 rows) instead of leaving 150 for the next minutes."""
    reach = _reach(engine, _config(receiver, dnd={**_window_around_now(), "strategy": "delay"}, idempotent=True))
    queued = {reach.send({"provider": "hook", "to": f"user-{i}", "body": "held"}).queue_id for i in range(250)}
    set_clock_offset(engine, clock_offset(engine) + 2 * HOUR_MS)  # the window is over
    rounds: list[int] = []
    run_round = reach.run_round

    def counted() -> Any:
        report = run_round()
        rounds.append(report.claimed)
        return report

    reach.run_round = counted  # type: ignore[method-assign]
    reach.on_tick(reach._now())
    deadline = time.monotonic() + 120
    while reach.queue.counts()["sent"] < 250:
        assert time.monotonic() < deadline, f"rounds so far: {rounds}, counts: {reach.queue.counts()}"
        time.sleep(0.2)
    reach.close()  # waits for the last round, which holds its connection until it ends
    assert rounds[:3] == [100, 100, 50]
    keys = [request.header("Idempotency-Key") for request in receiver.requests]
    assert sorted(keys) == sorted(queued) and len(set(keys)) == 250


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_round_sends_up_to_its_concurrency_at_once(engine: Engine, receiver: RecordingServer,
                                                      concurrency: int) -> None:
    """8 held messages to a receiver that answers each after 0.8 s: a round keeps
    ``queue.concurrency`` requests in flight (never more), and each message is sent once and settled.

    In flight is counted from arrival times: a request is in flight from its arrival until its
    answer, which comes no sooner than 0.8 s later, and a sender's next request arrives only
    after it has that answer -- so requests that arrived within 0.8 s of each other overlapped."""
    config = _config(receiver, dnd={**_window_around_now(), "strategy": "delay"}, idempotent=True, path="/slow/0.8")
    config["queue"]["concurrency"] = concurrency
    reach = _reach(engine, config)
    queued = {reach.send({"provider": "hook", "to": f"user-{i}", "body": "held"}).queue_id for i in range(8)}
    set_clock_offset(engine, clock_offset(engine) + 2 * HOUR_MS)  # the window is over
    report = reach.run_round()
    assert (report.claimed, report.sent, report.lost) == (8, 8, 0)
    arrivals = sorted(r.received_at for r in receiver.requests)
    in_flight = [sum(1 for earlier in arrivals if earlier <= at < earlier + 0.8) for at in arrivals]
    assert max(in_flight) == concurrency, arrivals
    assert sorted(r.header("Idempotency-Key") for r in receiver.requests) == sorted(queued)
    assert reach.queue.counts()["sent"] == 8


def test_a_pool_too_small_for_the_senders_is_refused_by_name(database: TestDatabase, receiver: RecordingServer) -> None:
    """A round needs a connection for its claims and one per sender; on a scheduler's engine,
    the node's connections too. Too small a pool is refused up front, naming the setting."""
    small = create_engine({"url": database.url, "pool_size": 4})
    shared = create_engine({"url": database.url, "pool_size": 12})
    try:
        with pytest.raises(ReachConfigError) as info:
            _reach(small, _config(receiver))  # 4 senders + 1
        assert info.value.field == "queue.concurrency" and "at least 5" in str(info.value)
        one_sender = _config(receiver)
        one_sender["queue"]["concurrency"] = 1
        _reach(small, one_sender).close()  # 1 sender + 1 fits

        node = Scheduler(shared, SchedulerConfig(node_id="pool-check"))  # 6 handler threads + 4
        node.init()
        reach = _reach(shared, _config(receiver))
        try:
            with pytest.raises(ReachConfigError) as info:
                reach.attach(node)  # 10 + the alert probe's line + 4 + 1 > 12
            assert info.value.field == "queue.concurrency" and "at least 16" in str(info.value)
        finally:
            reach.close()
            node.close()
        with pytest.raises(InitFailedError, match="max_concurrency: 6 handler threads need a connection pool of at "
                                                  "least 10"):
            Scheduler(small, SchedulerConfig(node_id="too-small")).init()
    finally:
        close_engine(small)
        close_engine(shared)


@pytest.mark.parametrize(("idempotent", "outcomes"), [(False, ["unknown"]), (True, ["retried", "retried", "dead"])])
def test_each_round_reports_what_it_did(engine: Engine, receiver: RecordingServer,
                                        idempotent: bool, outcomes: list[str]) -> None:
    reach = _reach(engine, _config(receiver, dnd={**_window_around_now(), "strategy": "delay"},
                                   idempotent=idempotent, path="/status/503"))
    reach.send({"provider": "hook", "to": "u", "body": "b"})
    for outcome in outcomes:
        set_clock_offset(engine, clock_offset(engine) + 2 * HOUR_MS)  # past the window and any backoff
        assert reach.run_round() == RoundReport(claimed=1, **{outcome: 1})
    assert reach.run_round() == RoundReport()  # nothing left to do


def test_a_round_first_settles_the_claims_of_a_vanished_owner(engine: Engine, receiver: RecordingServer) -> None:
    reach = _reach(engine, _config(receiver))
    queue_id = str(uuid.uuid4())
    vanished = QueueRepository(engine, "vanished-node", 1_000)
    vanished.enqueue(queue_id, "hook", None, "u", "Subject", "Body", {}, (3, 1_000, 4_000), None)
    assert vanished.claim_next(vanished.now(), "tok") is not None and vanished.mark_sending(queue_id, "tok")
    time.sleep(1.1)  # its lease runs out: the request may have gone out, and the provider is not idempotent
    assert reach.run_round() == RoundReport(recovered=1)
    entry = reach.queue.get(queue_id)
    assert entry is not None and entry.status == "unknown"
    assert receiver.requests == []


def test_a_message_about_a_team_is_that_teams_in_the_queue(engine: Engine, receiver: RecordingServer,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``team`` on a send: its queued row is the team's (members see and settle it); a bad team is
    refused naming ``team`` and queues nothing, whether the message would be held or sent now."""
    teams = TeamRepository(engine)
    teams.create("ops", "Operations")
    reach = _reach(engine, _config(receiver, dnd={**_window_around_now(), "strategy": "delay"}))
    held = reach.send({"provider": "hook", "to": "u", "body": "b", "team": "ops"}).queue_id
    nobodys = reach.send({"provider": "hook", "to": "u", "body": "b"}).queue_id
    assert held is not None and nobodys is not None
    ops = Scope(frozenset({"ops"}))
    entry = reach.queue.get(held, ops)
    assert entry is not None and entry.team == "ops" and reach.queue.get(nobodys, ops) is None
    before = reach.queue.counts()
    sender_now = _reach(engine, _config(receiver))
    for team in ("Ops", "nobody", "ops\x00", 7, "", "x" * 65):
        for which in (reach, sender_now):
            with pytest.raises(ReachConfigError) as info:
                which.send({"provider": "hook", "to": "u", "body": "b", "team": team})
            assert info.value.field == "team", (team, info.value)
            assert ("names no team here" if team == "nobody" else "must") in str(info.value), info.value
    assert reach.queue.counts() == before and len(receiver.requests) == 0
    assert sender_now.send({"provider": "hook", "to": "u", "body": "b", "team": "ops"}).message_id is not None
    with pytest.raises(ReachConfigError) as info:  # without a database a team cannot be checked
        _reach(None, _config(receiver)).send({"provider": "log", "to": "x", "body": "b", "team": "ops"})
    assert info.value.field == "team"
    teams.create("short-lived", "Short-lived")
    monkeypatch.setattr(Reach, "_teams", lambda self: {"ops", "short-lived"})  # read before its deletion
    teams.delete("short-lived")
    with pytest.raises(ReachConfigError) as info:
        reach.send({"provider": "hook", "to": "u", "body": "b", "team": "short-lived"})
    assert info.value.field == "team" and reach.queue.counts() == before
    assert str(info.value).count("team:") == 1, info.value

    def unreadable(self: TeamRepository) -> None:
        raise DatabaseError("database read failed: the server went away")

    monkeypatch.undo()  # Reach._teams as it is, reading the teams through a failing repository
    monkeypatch.setattr(TeamRepository, "all", unreadable)
    with pytest.raises(SendFailedError, match="team could not be read"):  # a ReachError, nothing sent
        sender_now.send({"provider": "hook", "to": "u", "body": "b", "team": "ops"})
    assert len(receiver.requests) == 1  # the one sent above
