"""Seconds without a database (a failover's), met by a node on PostgreSQL and MariaDB (issue #31).

The node reaches the server through tests/helpers/tcp_proxy.py, which refuses every connection
for a few seconds while a handler runs: its terminal commit, the ticks and the lease renewals all
meet the outage. The rules: the result is kept and written once the database answers (the run is
``success``, sequence 1, not settled as for a dead owner); the log says the outage once as it
begins and once as it ends, with no traceback; the ticks back off instead of asking at their
interval. (On a real primary and standby: tests/ha/.)
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.cron import cron_occurrence_id
from scheduler_core.db import close_engine, create_engine
from scheduler_core.errors import ConflictError
from scheduler_core.model import ExecutionLog
from scheduler_core.reach import Reach
from scheduler_core.store.executions import WARM_CONNECTIONS
from scheduler_core.store.transactions import is_unreachable, write
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.conftest import TestDatabase
from tests.helpers.fault_cluster import recording_hooks
from tests.helpers.fault_node import statement_kind
from tests.helpers.http_server import RecordingServer
from tests.helpers.journal import abandon_running_execution, enter_minute, slot_holder, wait_for_status
from tests.helpers.oracle import read_effects, read_journal
from tests.helpers.tcp_proxy import TcpProxy
from tests.integration.test_alerts import wait_until
from tests.integration.test_reach_service import _window_around_now

OUTAGE_S = 3.0
TICK_MS = 100
HANDLER_S = 1.0


@pytest.fixture
def proxy(server_database: TestDatabase) -> Iterator[TcpProxy]:
    link = TcpProxy.for_url(server_database.url)
    try:
        yield link
    finally:
        link.close()


@pytest.fixture
def proxied(server_database: TestDatabase, proxy: TcpProxy) -> Iterator[Engine]:
    engine = create_engine(proxy.url(server_database.url))
    try:
        yield engine
    finally:
        close_engine(engine)


def _scheduler_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("scheduler_core")]


def test_a_result_that_meets_an_outage_is_kept_and_the_log_says_it_once(
        server_engine: Engine, proxied: Engine, proxy: TcpProxy, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    events = tmp_path / "events.jsonl"
    node = Scheduler(proxied, SchedulerConfig(node_id="node-a", lease_ms=15_000, tick_interval_ms=TICK_MS),
                     hooks=recording_hooks(events, "node-a", sleeps={"report": HANDLER_S}))
    node.init()
    node.register(TaskDefinition(id="report", name="Report", cron="0 0 1 1 *"))
    node.start()
    caplog.set_level(logging.INFO, logger="scheduler_core")
    record: list[ExecutionLog] = []
    try:
        runner = threading.Thread(target=lambda: record.append(node.trigger("report", idempotency_key="k")))
        runner.start()
        deadline = time.monotonic() + 30
        while not read_effects(events):  # the handler runs
            assert time.monotonic() < deadline, "the handler did not start"
            time.sleep(0.02)
        proxy.refuse()
        time.sleep(OUTAGE_S)  # the handler ends in the outage: its terminal commit finds no database
        refused = proxy.refused
        proxy.release()
        runner.join(timeout=60)
        assert not runner.is_alive(), "the trigger never returned"
    finally:
        node.close()

    (log,) = record
    assert (log.status, log.persistence.status) == ("success", "persisted"), log
    (row,) = read_journal(server_engine).executions
    assert (row["status"], row["sequence"], row["owner_node"], row["attempt"]) == ("success", 1, "node-a", 1)
    assert len(read_effects(events)) == 1

    records = _scheduler_records(caplog)
    began = [r for r in records if "database unreachable since" in r.getMessage()]
    ended = [r for r in records if "database reachable again" in r.getMessage()]
    assert (len(began), len(ended)) == (1, 1), [r.getMessage() for r in records]
    assert not [r.getMessage() for r in records if r.exc_info], "a traceback in an outage"
    # At the tick interval alone the node would have tried OUTAGE_S / TICK_MS = 30 connections;
    # backing off (and the renewals and the finish's retries with it) it tries far fewer.
    assert refused < OUTAGE_S * 1000 / TICK_MS, f"{refused} connections tried in {OUTAGE_S} s"


def test_a_node_started_without_a_database_warms_up_once_it_answers(
        proxied: Engine, proxy: TcpProxy, caplog: pytest.LogCaptureFixture) -> None:
    """No primary when a node starts (a failover under way): its first tick meets the outage and
    says so, with no warm-up before it (whose connections would each have waited first, on a
    server that does not answer); the warm-up runs once a tick is answered, and does not fail."""
    kinds: Counter[str] = Counter()

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        kind = statement_kind(statement)
        if kind is not None:
            kinds[kind] += 1

    node = Scheduler(proxied, SchedulerConfig(node_id="node-a", tick_interval_ms=TICK_MS))
    node.init()
    caplog.set_level(logging.INFO, logger="scheduler_core")
    event.listen(proxied, "before_cursor_execute", count)
    proxy.refuse()
    node.start()
    try:
        wait_until(lambda: any("database unreachable since" in r.getMessage() for r in _scheduler_records(caplog)),
                  "the first tick to meet the outage")
        assert kinds["claim"] == 0, kinds
        proxy.release()
        wait_until(lambda: kinds["claim"] >= WARM_CONNECTIONS, "the warm-up once the database answers")
        assert {"claim", "begin", "finish"} <= set(kinds), kinds
        assert not [r.getMessage() for r in _scheduler_records(caplog) if "warm-up" in r.getMessage()]
    finally:
        node.close()
        event.remove(proxied, "before_cursor_execute", count)


def test_what_counts_as_unreachable(server_database: TestDatabase, server_engine: Engine, proxied: Engine,
                                    proxy: TcpProxy) -> None:
    """Refused connections and a connection the server ends are "unreachable" (ask again later);
    a duplicate key or a statement timeout is not (asking again would not help)."""
    def fails(engine: Engine, sql: str) -> BaseException:
        try:
            write(engine, lambda conn: conn.exec_driver_sql(sql))
        except Exception as exc:
            return exc
        raise AssertionError(f"{sql!r} did not fail")

    proxy.refuse()
    assert is_unreachable(fails(proxied, "SELECT 1"))
    proxy.release()
    with proxied.connect() as conn:  # a connection the link then drops under it
        conn.exec_driver_sql("SELECT 1")
        proxy.cut()
        with pytest.raises(Exception) as dropped:
            conn.exec_driver_sql("SELECT 1")
    assert is_unreachable(dropped.value)

    write(server_engine, lambda conn: conn.exec_driver_sql("CREATE TABLE probe (id INT PRIMARY KEY)"))
    write(server_engine, lambda conn: conn.exec_driver_sql("INSERT INTO probe VALUES (1)"))
    assert not is_unreachable(fails(server_engine, "INSERT INTO probe VALUES (1)"))
    if server_database.kind == "postgresql":  # (MariaDB's SLEEP answers 1 when interrupted: no error)
        assert not is_unreachable(fails(server_engine, "SET LOCAL statement_timeout = 50; SELECT pg_sleep(2)"))


def test_a_delivery_whose_settlement_meets_an_outage_is_still_sent(server_engine: Engine, proxied: Engine,
                                                                   proxy: TcpProxy) -> None:
    """A plain webhook's message is delivered, and the database is gone when the queue settles it.
    The queue knows it was sent: it writes that again until the database answers, rather than
    leaving the row ``sending`` for recovery to call ``unknown`` once the lease runs out."""
    receiver = RecordingServer()
    try:
        config = {"providers": [{"name": "hook", "type": "api", "url": receiver.url("/slow/0.5"), "idempotent": False}],
                  "dnd": {**_window_around_now(), "strategy": "delay"}}  # queued, not sent at once
        reach = Reach(proxied, config, node_id="test-node")
        reach.init()
        queue_id = reach.send({"provider": "hook", "to": "u", "body": "b"}).queue_id
        assert queue_id is not None
        set_clock_offset(proxied, clock_offset(proxied) + 2 * 3_600_000)  # past the window
        report: list[Any] = []
        rounds = threading.Thread(target=lambda: report.append(reach.run_round()))
        rounds.start()
        deadline = time.monotonic() + 30
        while not receiver.requests:
            assert time.monotonic() < deadline, "the message was not sent"
            time.sleep(0.01)
        proxy.refuse()  # the provider answers in 0.5 s: the settlement meets the outage
        time.sleep(OUTAGE_S)
        proxy.release()
        rounds.join(timeout=60)
        assert not rounds.is_alive()
        (done,) = report
        assert (done.sent, done.lost) == (1, 0), done
        entry = reach.queue.get(queue_id)
        assert entry is not None and entry.status == "sent", entry
        assert len(receiver.requests) == 1
        reach.close()
    finally:
        receiver.close()


def test_a_resolution_whose_answer_was_lost_is_read_back(server_engine: Engine, proxied: Engine,
                                                          proxy: TcpProxy) -> None:
    """An operator resolves an unknown execution and the answer to its COMMIT is lost: the call
    reads the row once the database answers and reports the resolution it holds, instead of an
    error that invites a second try (which would be told the row is no longer unknown)."""
    node = Scheduler(proxied, SchedulerConfig(node_id="dashboard", tick_interval_ms=TICK_MS))
    node.init()
    try:
        node.register(TaskDefinition(id="report", name="Report", cron="0 0 1 1 *"))
        occurrence = abandon_running_execution(server_engine, "report", started=True, lease_ms=300)
        node.start()  # its expiry scan settles the dead owner's run: unknown
        unknown = wait_for_status(node, occurrence, "unknown")
        sprung = proxy.drop_reply_to_next_commit(lambda statements: any("resolved_by" in s for s in statements))
        resolved = node.execution.resolve_unknown(occurrence, "success", unknown.updated_at, "ops", "checked")
        assert sprung.is_set(), "the resolution's COMMIT answer was not dropped"
        assert (resolved.status, resolved.resolved_by, resolved.resolution_reason) == ("success", "ops", "checked")
        with pytest.raises(ConflictError, match="is success, not unknown"):  # compare-and-set: asked again, told why
            node.execution.resolve_unknown(occurrence, "success", unknown.updated_at, "ops", "checked")
    finally:
        node.close()


def _sets_only(table: str, columns: set[str]) -> Callable[[list[str]], bool]:
    """A COMMIT trap matching a transaction with an UPDATE of ``table`` that sets exactly ``columns``."""
    pattern = re.compile(rf"^\s*UPDATE\s+{table}\s+SET\s+(?P<set>.*?)\s+WHERE\s", re.IGNORECASE | re.DOTALL)

    def matches(statements: list[str]) -> bool:
        for statement in statements:
            found = pattern.match(statement)
            if found and {c.lower() for c in re.findall(r"(?:^|,)\s*(\w+)\s*=", found["set"])} == columns:
                return True
        return False

    return matches


def _jittered_claim_answer_lost(proxied: Engine, proxy: TcpProxy, ran: list[str],
                                tick_interval_ms: int) -> tuple[Scheduler, str, threading.Event]:
    """A started node with a jittered occurrence due this minute (lease 60 s), the answer to the
    COMMIT of its queued row's claim set to be dropped: (node, occurrence, dropped)."""
    node = Scheduler(proxied, SchedulerConfig(node_id="node-a", lease_ms=60_000, tick_interval_ms=tick_interval_ms),
                     hooks={"on_task_execute": lambda event: ran.append(event.context.occurrence_id) or "ok"})
    node.init()
    minute = enter_minute(proxied, seconds_into=0.5)  # the node's engine: its clock offset is its own
    node.register(TaskDefinition(id="jit", name="jit", cron="* * * * *", jitter_ms=2_000,
                                 calendar={"active_from_ms": minute, "active_until_ms": minute + 60_000}))
    sprung = proxy.drop_reply_to_next_commit(
        _sets_only("executions", {"status", "reason", "execution_token", "owner_node", "lease_until", "updated_at"}))
    node.start()
    return node, cron_occurrence_id("jit", minute), sprung


def test_a_queued_claim_whose_answer_was_lost_is_read_back_and_run(
        server_engine: Engine, proxied: Engine, proxy: TcpProxy) -> None:
    """A jittered occurrence waits ``queued`` for its delayed start; the answer to the COMMIT of
    its claim (``claim_queued``: running, under a token of this claim) is lost. The node reads the
    row back on its next scan, finds its token, and runs it now, once -- not left running under a
    token nobody holds until its lease runs out and it is settled ``interrupted``, never run."""
    ran: list[str] = []
    node, occurrence, sprung = _jittered_claim_answer_lost(proxied, proxy, ran, tick_interval_ms=TICK_MS)
    try:
        wait_until(sprung.is_set, "the queued claim's COMMIT answer to be dropped", timeout=30)
        done = wait_for_status(node, occurrence, "success", timeout=20)  # a lease is 60 s
    finally:
        node.close()
    assert (done.sequence, [(a.node_id, a.status) for a in done.attempts]) == (1, [("node-a", "success")])
    assert ran == [occurrence]


@pytest.mark.parametrize("ending", ["stop", "close"])
def test_a_node_that_stops_with_a_lost_claim_answer_reads_it_back(
        server_engine: Engine, proxied: Engine, proxy: TcpProxy, ending: str) -> None:
    """The node stops right after the answer to a queued claim's COMMIT was lost, before a scan
    could read it back: the stop reads it back. Stopped, the node runs it (it is its own); closed,
    it ends ``interrupted`` (closing) with its handler never called and its slot free -- at once,
    not running under a token nobody holds until its lease (60 s) runs out."""
    ran: list[str] = []
    node, occurrence, sprung = _jittered_claim_answer_lost(proxied, proxy, ran, tick_interval_ms=2_000)
    try:
        wait_until(sprung.is_set, "the queued claim's COMMIT answer to be dropped", timeout=30)
        node.stop() if ending == "stop" else node.close()  # the next scan is a tick interval (1-2 s backoff) away
        (row,) = read_journal(server_engine).executions
    finally:
        node.close()
    if ending == "stop":
        assert (row["status"], row["sequence"], ran) == ("success", 1, [occurrence])
    else:
        assert (row["status"], row["reason"], ran) == ("interrupted", "closing", [])
        assert slot_holder(server_engine, "jit") is None


def test_a_wave_whose_sending_mark_was_not_answered_is_not_sent_and_goes_back(
        server_engine: Engine, proxied: Engine, proxy: TcpProxy) -> None:
    """The answer to the COMMIT that marks a wave ``sending`` is lost: nothing has been sent, so
    nothing is sent then, and the message goes back to the queue (not to recovery, which would
    have to call a plain provider's message ``unknown`` once its lease ran out); the next round
    sends it, once."""
    receiver = RecordingServer()
    try:
        config = {"providers": [{"name": "hook", "type": "api", "url": receiver.url("/ok"), "idempotent": False}],
                  "dnd": {**_window_around_now(), "strategy": "delay"},
                  "queue": {"retry_delay_ms": 1_000, "max_retry_delay_ms": 4_000, "max_attempts": 3}}
        reach = Reach(proxied, config, node_id="test-node")
        reach.init()
        queue_id = reach.send({"provider": "hook", "to": "u", "body": "b"}).queue_id
        assert queue_id is not None
        set_clock_offset(proxied, clock_offset(proxied) + 2 * 3_600_000)  # past the window
        sprung = proxy.drop_reply_to_next_commit(_sets_only("reach_queue", {"status", "locked_until", "updated_at"}))
        first = reach.run_round()
        assert sprung.is_set(), "the sending mark's answer was not dropped"
        assert (first.sent, first.retried, receiver.requests) == (0, 1, []), first
        set_clock_offset(proxied, clock_offset(proxied) + 3_600_000)  # past its retry delay (and any lease)
        second = reach.run_round()
        entry = reach.queue.get(queue_id)
        assert entry is not None and (entry.status, second.sent) == ("sent", 1), (entry, second)
        assert len(receiver.requests) == 1
        reach.close()
    finally:
        receiver.close()


def test_a_manual_claim_whose_answer_was_lost_is_recognised_and_run(server_engine: Engine, proxied: Engine,
                                                                    proxy: TcpProxy, tmp_path: Path) -> None:
    """``trigger()``'s claim COMMIT lands and its answer is lost: the claim is asked again with the
    same token, found to be this node's own, and run -- once; not an error for an occurrence that
    then waits for its lease to expire."""
    events = tmp_path / "events.jsonl"
    node = Scheduler(proxied, SchedulerConfig(node_id="node-a"), hooks=recording_hooks(events, "node-a"))
    node.init()
    try:
        node.register(TaskDefinition(id="report", name="Report", cron="0 0 1 1 *"))
        sprung = proxy.drop_reply_to_next_commit(
            lambda statements: any(s.lstrip().upper().startswith("INSERT INTO EXECUTIONS") for s in statements))
        log = node.trigger("report", idempotency_key="k")
        assert sprung.is_set(), "the claim's answer was not dropped"
    finally:
        node.close()
    assert (log.status, log.sequence) == ("success", 1), log
    (row,) = read_journal(server_engine).executions
    assert (row["status"], row["owner_node"]) == ("success", "node-a")
    assert len(read_effects(events)) == 1


def test_a_settlement_whose_answer_was_lost_is_read_back(server_engine: Engine, proxied: Engine,
                                                         proxy: TcpProxy) -> None:
    """The COMMIT of a wave's settlement lands and its answer is lost: written again it reaches no
    row (the first cleared their tokens), so the rows are read back, found as decided (sent, this
    provider's message id), and the round reports the message sent, not lost."""
    receiver = RecordingServer()
    try:
        config = {"providers": [{"name": "hook", "type": "api", "url": receiver.url("/ok"), "idempotent": False}],
                  "dnd": {**_window_around_now(), "strategy": "delay"}}
        reach = Reach(proxied, config, node_id="test-node")
        reach.init()
        queue_id = reach.send({"provider": "hook", "to": "u", "body": "b"}).queue_id
        assert queue_id is not None
        set_clock_offset(proxied, clock_offset(proxied) + 2 * 3_600_000)  # past the window
        settles = re.compile(r"^\s*UPDATE\s+reach_queue\s+SET\s.*\blast_error\s*=", re.IGNORECASE | re.DOTALL)
        sprung = proxy.drop_reply_to_next_commit(lambda statements: any(settles.match(s) for s in statements))
        report = reach.run_round()
        assert sprung.is_set(), "the settlement's answer was not dropped"
        assert (report.sent, report.lost) == (1, 0), report
        entry = reach.queue.get(queue_id)
        assert entry is not None and entry.status == "sent" and len(receiver.requests) == 1
        reach.close()
    finally:
        receiver.close()
