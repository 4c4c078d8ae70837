"""The ``pagerduty`` provider (PagerDuty Events API v2) against a stand-in of the service on 127.0.0.1
(tests/helpers/pagerduty_server.py), and through the durable queue on every database: the event it
posts, every row of its classification, the settings it refuses (each naming its field), the routing
key kept secret in snapshots, errors and dead letters, and the queue id sent as ``dedup_key`` so a
started failure is retried into one alert.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from scheduler_core.errors import DeliveryRejectedError, InvalidRecipientError, ReachConfigError
from scheduler_core.reach import Reach
from scheduler_core.reach.base import Delivery, Provider, RenderedMessage
from scheduler_core.reach.providers import PROVIDER_TYPES, build_provider, build_providers
from scheduler_core.settings import check_reach
from scheduler_core.store.reach_queue import QueueRepository
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.helpers.http_server import RecordingServer
from tests.helpers.pagerduty_server import PagerDutyServer

KEY = "R0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5"  # an integration key: the secret
HOUR_MS = 3_600_000


@pytest.fixture
def pagerduty() -> Iterator[PagerDutyServer]:
    with PagerDutyServer(KEY) as server:
        yield server


@pytest.fixture
def receiver() -> Iterator[RecordingServer]:
    with RecordingServer() as server:
        yield server


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port that refuses connections: bound, never listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def provider(url: str, **settings: Any) -> Provider:
    return build_provider({"name": "oncall", "type": "pagerduty", "routing_key": KEY, "url": url, **settings},
                          environ={})


def message(to: str = "oncall", subject: str | None = "Backup failed", body: str = "nightly: exit 3",
            **extra: Any) -> RenderedMessage:
    return RenderedMessage(to=to, subject=subject, body=body, extra=extra)


def failed(delivery: Delivery, failure_class: str, started: bool) -> None:
    assert (delivery.sent, delivery.failure_class, delivery.started) == (False, failure_class, started), delivery
    assert delivery.error and KEY not in delivery.error


# --- one send against the stand-in --------------------------------------------------------


def test_pagerduty_is_an_idempotent_provider_type() -> None:
    assert "pagerduty" in PROVIDER_TYPES
    made = provider("https://events.pagerduty.com/v2/enqueue")
    assert made.type == "pagerduty" and made.idempotent is True


def test_a_trigger_is_posted_with_the_key_as_its_dedup_key(pagerduty: PagerDutyServer) -> None:
    delivery = provider(pagerduty.url()).send(message(extra_field="not sent"), "queue-1", 5_000)
    assert delivery == Delivery(sent=True, message_id="queue-1")
    [request] = pagerduty.requests
    assert request.method == "POST" and request.path == "/v2/enqueue"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == {"routing_key": KEY, "event_action": "trigger", "dedup_key": "queue-1",
                              "payload": {"summary": "Backup failed", "source": "hai-scheduler",
                                          "severity": "error", "custom_details": {"body": "nightly: exit 3"}}}
    assert pagerduty.alerts == {"queue-1": 1}


def test_the_summary_is_the_subject_else_the_body_s_first_line_at_most_1024_characters(
        pagerduty: PagerDutyServer) -> None:
    made = provider(pagerduty.url(), source="scheduler-prod-1", severity="critical")
    assert made.send(message(subject=None, body="disk full on db-2\nused 100%\n"), "k1", 5_000).sent
    assert made.send(message(subject="é" * 2_000, body="Grüße 世界"), "k2", 5_000).sent
    assert made.send(message(subject=" ", body="\n  \nnightly backup: exit 3\nmore"), "k3", 5_000).sent
    first, second, third = pagerduty.events()
    assert first["payload"] == {"summary": "disk full on db-2", "source": "scheduler-prod-1", "severity": "critical",
                                "custom_details": {"body": "disk full on db-2\nused 100%\n"}}
    assert second["payload"]["summary"] == "é" * 1_023 + "…"
    assert second["payload"]["custom_details"] == {"body": "Grüße 世界"}
    assert third["payload"]["summary"] == "nightly backup: exit 3"  # a blank subject or line is skipped


def test_without_a_key_pagerduty_makes_one_and_it_is_the_message_id(pagerduty: PagerDutyServer) -> None:
    delivery = provider(pagerduty.url()).send(message(), None, 5_000)
    assert delivery.sent and "dedup_key" not in pagerduty.events()[0]
    assert list(pagerduty.alerts) == [delivery.message_id]


def test_a_re_send_with_the_same_key_is_folded_into_one_alert(pagerduty: PagerDutyServer) -> None:
    made = provider(pagerduty.url())
    assert made.send(message(), "queue-7", 5_000).sent and made.send(message(), "queue-7", 5_000).sent
    assert pagerduty.alerts == {"queue-7": 2}  # two triggers, one alert


@pytest.mark.parametrize(("status", "body"), [
    (202, {"status": "throttled"}), (202, None), (200, {"ok": True}),
])
def test_a_2xx_without_a_success_status_is_started(pagerduty: PagerDutyServer, status: int, body: Any) -> None:
    pagerduty.answer_next(status, body, taken=True)
    failed(provider(pagerduty.url()).send(message(), "k", 5_000), "transient_failure", started=True)


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503])
def test_throttling_and_server_errors_are_transient_and_started(pagerduty: PagerDutyServer, status: int) -> None:
    pagerduty.answer_next(status, {"status": "error"}, taken=status >= 500)
    delivery = provider(pagerduty.url()).send(message(), "k", 5_000)
    failed(delivery, "transient_failure", started=True)
    assert delivery.error == f"HTTP {status} " + {408: "Request Timeout", 425: "Too Early", 429: "Too Many Requests",
                                                   500: "Internal Server Error", 502: "Bad Gateway",
                                                   503: "Service Unavailable"}[status]


def test_an_invalid_event_is_refused_with_nothing_created(pagerduty: PagerDutyServer) -> None:
    """The stand-in refuses an event for a routing key it does not know, as PagerDuty does: 400."""
    delivery = build_provider({"name": "oncall", "type": "pagerduty", "routing_key": "x" * 32,
                               "url": pagerduty.url()}, environ={}).send(message(), "k", 5_000)
    failed(delivery, "permanent_rejection", started=False)
    assert delivery.error == "HTTP 400 Bad Request: PagerDuty refused the event; no alert was created"
    assert pagerduty.alerts == {} and len(pagerduty.requests) == 1


@pytest.mark.parametrize("status", [401, 403, 404, 413])
def test_any_other_4xx_is_a_rejection_not_started(pagerduty: PagerDutyServer, status: int) -> None:
    pagerduty.answer_next(status, {"status": "invalid"})
    failed(provider(pagerduty.url()).send(message(), "k", 5_000), "permanent_rejection", started=False)


def test_a_redirect_is_not_followed_and_is_a_rejection(pagerduty: PagerDutyServer) -> None:
    pagerduty.answer_next(302, None)
    failed(provider(pagerduty.url()).send(message(), "k", 5_000), "permanent_rejection", started=True)
    assert len(pagerduty.requests) == 1


def test_a_refused_connection_is_not_started(closed_port: int) -> None:
    delivery = provider(f"http://127.0.0.1:{closed_port}/v2/enqueue").send(message(), "k", 5_000)
    failed(delivery, "provider_unavailable", started=False)


def test_a_lost_connection_after_sending_is_started(receiver: RecordingServer) -> None:
    failed(provider(receiver.url("/drop")).send(message(), "k", 5_000), "transient_failure", started=True)
    assert receiver.requests[0].json()["dedup_key"] == "k"


def test_a_deadline_after_sending_is_started_though_pagerduty_took_the_event(pagerduty: PagerDutyServer) -> None:
    pagerduty.delay_s = 5.0
    started = time.monotonic()
    delivery = provider(pagerduty.url(), timeout_ms=1_000).send(message(), "k", 60_000)
    failed(delivery, "transient_failure", started=True)
    assert "timeout after 1000 ms" in (delivery.error or "") and time.monotonic() - started < 4.5
    assert pagerduty.alerts == {"k": 1}  # taken: only the dedup_key keeps a re-send from paging twice


def test_with_no_time_left_nothing_is_sent(pagerduty: PagerDutyServer) -> None:
    failed(provider(pagerduty.url()).send(message(), "k", 0), "transient_failure", started=False)
    assert not pagerduty.requests


@pytest.mark.parametrize(("sent", "key"), [
    (message(subject=None, body=""), "k"), (message(subject=None, body="\n \n\t"), "k"),
    (message(subject="  ", body="   "), "k"), (message(body="bad \ud800 surrogate"), "k"),
    (message(body="x" * (512 * 1024)), "k"), (message(), "k" * 256), (message(), "key\nline"),
    (message(), "clé"),
], ids=["empty", "blank-lines", "blank", "surrogate", "over-512-KB", "long-key", "key-with-lf",
        "non-ascii-key"])
def test_a_message_that_cannot_make_a_valid_event_is_invalid_and_nothing_is_sent(
        pagerduty: PagerDutyServer, sent: RenderedMessage, key: str) -> None:
    failed(provider(pagerduty.url()).send(sent, key, 5_000), "invalid_message", started=False)
    assert not pagerduty.requests


# --- settings -----------------------------------------------------------------------------

PAGERDUTY = {"name": "oncall", "type": "pagerduty", "routing_key": KEY}

INVALID: list[tuple[dict[str, Any], str]] = [  # (changes, the field the error names)
    ({"routing_key": None}, "providers.oncall.routing_key"), ({"routing_key": ""}, "providers.oncall.routing_key"),
    ({"routing_key": 12345}, "providers.oncall.routing_key"),
    ({"routing_key": KEY[:-1]}, "providers.oncall.routing_key"),
    ({"routing_key": KEY + "0"}, "providers.oncall.routing_key"),
    ({"routing_key": KEY[:-1] + "-"}, "providers.oncall.routing_key"),
    ({"routing_key": f" {KEY}"}, "providers.oncall.routing_key"),
    ({"routing_key": KEY[:-1] + "\n"}, "providers.oncall.routing_key"),
    ({"url": ""}, "providers.oncall.url"), ({"url": 5}, "providers.oncall.url"),
    ({"url": "ftp://events.pagerduty.com/v2/enqueue"}, "providers.oncall.url"),
    ({"url": "https://"}, "providers.oncall.url"),
    ({"url": "https://events.pagerduty.com/v2/ x"}, "providers.oncall.url"),
    ({"url": "https://events.pagerduty.com:99999/v2/enqueue"}, "providers.oncall.url"),
    ({"source": ""}, "providers.oncall.source"), ({"source": 7}, "providers.oncall.source"),
    ({"source": " host-1"}, "providers.oncall.source"), ({"source": "host\n1"}, "providers.oncall.source"),
    ({"source": "h" * 256}, "providers.oncall.source"),
    ({"severity": "high"}, "providers.oncall.severity"), ({"severity": "ERROR"}, "providers.oncall.severity"),
    ({"severity": ""}, "providers.oncall.severity"), ({"severity": 3}, "providers.oncall.severity"),
    ({"timeout_ms": 999}, "providers.oncall.timeout_ms"), ({"timeout_ms": 86_400_001}, "providers.oncall.timeout_ms"),
    ({"timeout_ms": "5000"}, "providers.oncall.timeout_ms"), ({"timeout_ms": True}, "providers.oncall.timeout_ms"),
    # a typo in every setting is named, not ignored
    ({"routing_key": None, "routingkey": KEY}, "providers.oncall.routingkey"),
    ({"integration_key": KEY}, "providers.oncall.integration_key"),
    ({"ulr": "https://events.pagerduty.com/v2/enqueue"}, "providers.oncall.ulr"),
    ({"souce": "host-1"}, "providers.oncall.souce"), ({"severty": "info"}, "providers.oncall.severty"),
    ({"timeout": 5_000}, "providers.oncall.timeout"), ({"dedup_key": "x"}, "providers.oncall.dedup_key"),
    ({"event_action": "resolve"}, "providers.oncall.event_action"),
    ({"idempotent": False}, "providers.oncall.idempotent"), ({"headers": {"X-A": "1"}}, "providers.oncall.headers"),
]


@pytest.mark.parametrize(("changes", "field"), INVALID, ids=[f"{f}={c}"[:60] for c, f in INVALID])
def test_every_invalid_setting_is_refused_naming_its_field(changes: dict[str, Any], field: str) -> None:
    config = {key: value for key, value in {**PAGERDUTY, **changes}.items() if value is not None}
    with pytest.raises(ReachConfigError) as caught:
        build_providers([config], environ={})
    assert caught.value.field == field and str(caught.value).startswith(f"hai:reach:012 {field}: ")
    assert KEY not in str(caught.value) and KEY[:-1] not in str(caught.value)


def test_a_misspelt_setting_lists_the_known_ones() -> None:
    with pytest.raises(ReachConfigError) as caught:
        build_provider({**PAGERDUTY, "severty": "info"}, environ={})
    assert "known: routing_key, severity, source, timeout_ms, url" in str(caught.value)


def test_every_command_refuses_a_bad_setting_before_it_starts() -> None:
    """``HAI_REACH_CONFIG`` is checked with the other settings (scheduler_core/settings.py)."""
    check_reach({"providers": [PAGERDUTY]}, "HAI_REACH_CONFIG", environ={})
    with pytest.raises(ReachConfigError) as caught:
        check_reach({"providers": [{**PAGERDUTY, "severty": "info"}]}, "HAI_REACH_CONFIG", environ={})
    assert str(caught.value).startswith("hai:reach:012 HAI_REACH_CONFIG: providers.oncall.severty: is not a setting")
    with pytest.raises(ReachConfigError) as caught:
        check_reach({"providers": [{**PAGERDUTY, "routing_key": KEY[:-1]}]}, "HAI_REACH_CONFIG", environ={})
    assert str(caught.value).startswith("hai:reach:012 HAI_REACH_CONFIG: providers.oncall.routing_key: must be")
    assert KEY[:-1] not in str(caught.value)


def test_defaults_and_the_masked_snapshot_and_repr() -> None:
    made = build_provider(PAGERDUTY, environ={})
    assert made.snapshot() == {"name": "oncall", "type": "pagerduty", "url": "https://events.pagerduty.com/v2/enqueue",
                               "routing_key": "***", "source": "hai-scheduler", "severity": "error",
                               "timeout_ms": 30_000}
    full = build_provider({**PAGERDUTY, "url": "https://relay:pw-secret@pd-relay.example:8443/v2/enqueue",
                           "source": "db-2", "severity": "warning", "timeout_ms": 5_000}, environ={})
    snapshot = full.snapshot()
    assert snapshot["url"] == "https://relay:***@pd-relay.example:8443/v2/enqueue"
    assert (snapshot["source"], snapshot["severity"], snapshot["timeout_ms"]) == ("db-2", "warning", 5_000)
    for shown in (json.dumps(made.snapshot()), json.dumps(snapshot), repr(made), repr(full)):
        assert KEY not in shown and "pw-secret" not in shown
    assert repr(made) == ("PagerDutyProvider(name='oncall', source='hai-scheduler', severity='error', "
                          "timeout_ms=30000, type='pagerduty', idempotent=True)")


@pytest.mark.parametrize("to", ["oncall", "#ops", "张三", "a b", "a" * 31, "a" * 33, "x" * 512])
def test_any_printable_recipient_but_a_routing_key_is_accepted(to: str) -> None:
    build_provider(PAGERDUTY, environ={}).validate_recipient(to)


@pytest.mark.parametrize("to", ["", " ops", "ops ", "a\nb", "x" * 513, "\u202eevil", KEY,
                                "0123456789abcdef0123456789abcdef"])
def test_a_recipient_that_is_not_printable_text_or_is_a_routing_key_is_refused_and_nothing_is_sent(
        pagerduty: PagerDutyServer, to: str) -> None:
    made = provider(pagerduty.url())
    with pytest.raises(InvalidRecipientError) as caught:
        made.validate_recipient(to)
    assert caught.value.code == "hai:reach:004" and (not to.strip() or to.strip() not in str(caught.value))
    failed(made.send(message(to=to), "k", 5_000), "invalid_message", started=False)
    assert not pagerduty.requests


# --- through Reach and the durable queue, on every database --------------------------------


def _reach(engine: Engine, url: str, **queue: Any) -> Reach:
    reach = Reach(engine, {
        "providers": [{"name": "oncall", "type": "pagerduty", "routing_key": KEY, "url": url,
                       "severity": "critical", "timeout_ms": 2_000}],
        "templates": [{"name": "alert", "provider": "oncall", "subject": "[{event}] {task}", "body": "{error}"}],
        "queue": {"retry_delay_ms": 1_000, "max_retry_delay_ms": 4_000, "max_attempts": 2, **queue},
    }, node_id="pagerduty-test")
    reach.init()
    return reach


def _queued(engine: Engine) -> str:
    queue_id = str(uuid.uuid4())
    QueueRepository(engine, "test", 60_000).enqueue(queue_id, "oncall", "alert", "oncall", "[failed] backup",
                                                    "exit 3", {}, (2, 1_000, 4_000), None)
    return queue_id


def _round(engine: Engine, reach: Reach) -> None:
    set_clock_offset(engine, clock_offset(engine) + HOUR_MS)  # past any backoff
    reach.run_round()


def test_a_queued_message_triggers_one_alert_keyed_by_its_queue_id(engine: Engine,
                                                                    pagerduty: PagerDutyServer) -> None:
    reach = _reach(engine, pagerduty.url())
    try:
        queue_id = _queued(engine)
        _round(engine, reach)
        _round(engine, reach)
        entry = reach.queue.get(queue_id)
        assert entry is not None and entry.status == "sent" and entry.message_id == queue_id
        assert pagerduty.events() == [{"routing_key": KEY, "event_action": "trigger", "dedup_key": queue_id,
                                       "payload": {"summary": "[failed] backup", "source": "hai-scheduler",
                                                   "severity": "critical", "custom_details": {"body": "exit 3"}}}]
        assert pagerduty.alerts == {queue_id: 1}
    finally:
        reach.close()


@pytest.mark.parametrize("failure", ["500", "429", "deadline"])
def test_a_started_failure_is_retried_with_the_same_dedup_key_into_one_alert(
        engine: Engine, pagerduty: PagerDutyServer, failure: str) -> None:
    """Idempotent: where a non-idempotent provider's started failure becomes ``unknown``, this one is
    retried, and PagerDuty folds the second trigger into the alert the first one may have opened."""
    reach = _reach(engine, pagerduty.url())
    try:
        queue_id = _queued(engine)
        if failure == "deadline":
            pagerduty.delay_s = 4.0  # past the provider's 2 s, after the event was taken
        else:
            pagerduty.answer_next(int(failure), {"status": "error"}, taken=failure == "500")
        _round(engine, reach)
        entry = reach.queue.get(queue_id)
        assert entry is not None and entry.status == "pending" and entry.last_failure == "transient_failure"
        assert KEY not in entry.last_error
        pagerduty.delay_s = 0.0
        _round(engine, reach)
        entry = reach.queue.get(queue_id)
        assert entry is not None and entry.status == "sent" and entry.attempt_count == 2
        assert [event["dedup_key"] for event in pagerduty.events()] == [queue_id, queue_id]
        assert pagerduty.alerts == {queue_id: 1 if failure == "429" else 2}  # one alert either way
    finally:
        reach.close()


def test_an_invalid_event_is_dead_at_once(engine: Engine, pagerduty: PagerDutyServer) -> None:
    reach = _reach(engine, pagerduty.url())
    try:
        queue_id = _queued(engine)
        pagerduty.answer_next(400, {"status": "invalid event", "message": "Event object is invalid"})
        _round(engine, reach)
        entry = reach.queue.get(queue_id)
        assert entry is not None and entry.status == "dead" and entry.last_failure == "permanent_rejection"
        assert len(pagerduty.requests) == 1
    finally:
        reach.close()


def test_a_refused_connection_is_retried_then_dead_with_the_key_kept_secret(engine: Engine,
                                                                            closed_port: int) -> None:
    reach = _reach(engine, f"http://relay:pw-{KEY}@127.0.0.1:{closed_port}/v2/enqueue")
    try:
        queue_id = _queued(engine)
        _round(engine, reach)
        entry = reach.queue.get(queue_id)
        assert entry is not None and entry.status == "pending"  # nothing was sent: safe to try again
        _round(engine, reach)
        entry = reach.queue.get(queue_id)
        assert entry is not None and entry.status == "dead" and entry.last_failure == "attempts_exhausted"
        assert entry.last_error.startswith("provider_unavailable: not connected:")
        assert KEY not in entry.last_error
        assert KEY not in json.dumps(reach.config) and KEY not in json.dumps(reach.provider_snapshots())
    finally:
        reach.close()


def test_an_immediate_send_renders_the_template_and_a_refusal_raises(engine: Engine,
                                                                     pagerduty: PagerDutyServer) -> None:
    reach = _reach(engine, pagerduty.url())
    try:
        result = reach.send({"template": "alert", "to": "oncall",
                             "vars": {"event": "execution.failed", "task": "backup", "error": "exit 3"}})
        assert result.provider == "oncall" and not result.deferred
        event = pagerduty.events()[-1]
        assert event["payload"]["summary"] == "[execution.failed] backup" and "dedup_key" not in event
        assert list(pagerduty.alerts) == [result.message_id]  # the key PagerDuty made
        pagerduty.answer_next(400, {"status": "invalid event"})
        with pytest.raises(DeliveryRejectedError) as caught:
            reach.send({"provider": "oncall", "to": "oncall", "body": "hello"})
        assert caught.value.details["failure_class"] == "permanent_rejection" and KEY not in str(caught.value)
        with pytest.raises(InvalidRecipientError) as refused:
            reach.send({"provider": "oncall", "to": KEY, "body": "hello"})
        assert KEY not in str(refused.value) and len(pagerduty.requests) == 2
    finally:
        reach.close()
