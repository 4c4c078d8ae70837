"""The ``slack`` provider (a Slack or Mattermost incoming webhook) against the recording HTTP server
on 127.0.0.1, and through the durable queue on every database: the text it posts, the settings it
refuses (each naming its field), the classification it shares with the ``api`` webhook, and the
webhook URL kept secret in snapshots, errors and dead letters.
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

TOKEN = "Xq7rT2pLm9KcV4bN8sWd3FgH"  # the secret part of a Slack webhook URL
HOOK_PATH = f"services/T0123ABCD/B0456EFGH/{TOKEN}"
HOUR_MS = 3_600_000


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


def slack(url: str, **settings: Any) -> Provider:
    return build_provider({"name": "chat", "type": "slack", "url": url, **settings}, environ={})


def message(to: str = "#ops", subject: str | None = "Backup failed", body: str = "nightly: exit 3",
            **extra: Any) -> RenderedMessage:
    return RenderedMessage(to=to, subject=subject, body=body, extra=extra)


def failed(delivery: Delivery, failure_class: str, started: bool) -> None:
    assert (delivery.sent, delivery.failure_class, delivery.started) == (False, failure_class, started), delivery
    assert delivery.error and TOKEN not in delivery.error


# --- one send against a real HTTP server ----------------------------------------------------


def test_slack_is_a_provider_type() -> None:
    assert "slack" in PROVIDER_TYPES
    assert slack("https://hooks.slack.com/" + HOOK_PATH).type == "slack"


def test_slack_posts_the_subject_and_the_body_as_text(receiver: RecordingServer) -> None:
    delivery = slack(receiver.url(f"/ok/{HOOK_PATH}")).send(message(), "queue-1", 5_000)
    assert delivery.sent and delivery.message_id and delivery.message_id != "queue-1"
    [request] = receiver.requests
    assert request.method == "POST" and request.path == f"/ok/{HOOK_PATH}"
    assert request.header("Content-Type") == "application/json"
    assert request.json() == {"text": "Backup failed\nnightly: exit 3"}
    assert request.count("Idempotency-Key") == 0  # a Slack webhook deduplicates nothing: no key is promised


def test_slack_without_a_subject_posts_the_body_and_the_settings(receiver: RecordingServer) -> None:
    provider = slack(receiver.url("/ok"), channel="#alerts", username="hai-scheduler")
    assert provider.send(message(subject=None, body="Grüße 世界"), None, 5_000).sent
    assert receiver.requests[0].json() == {"text": "Grüße 世界", "channel": "#alerts", "username": "hai-scheduler"}


def test_slack_escapes_the_characters_slack_reads_as_markup(receiver: RecordingServer) -> None:
    # A task name or an error text must not ping a channel (<!channel>) or hide a link (<url|text>).
    assert slack(receiver.url("/ok")).send(message(subject="a & b", body="<!channel> <https://x|y>"), None,
                                           5_000).sent
    assert receiver.requests[0].json() == {"text": "a &amp; b\n&lt;!channel&gt; &lt;https://x|y&gt;"}


@pytest.mark.parametrize(("status", "failure_class"), [
    (408, "transient_failure"), (425, "transient_failure"), (429, "transient_failure"),
    (500, "transient_failure"), (503, "transient_failure"), (302, "permanent_rejection"),
])
def test_slack_statuses_that_may_follow_a_post_are_classified_as_the_api_webhook_does(
        receiver: RecordingServer, status: int, failure_class: str) -> None:
    slack_delivery = slack(receiver.url(f"/status/{status}")).send(message(), None, 5_000)
    api = build_provider({"name": "hook", "type": "api", "url": receiver.url(f"/status/{status}")})
    failed(slack_delivery, failure_class, started=True)  # the answer may come after the post was made
    assert slack_delivery == api.send(message(), None, 5_000)
    assert slack_delivery.error == f"HTTP {status} " + {302: "Found", 408: "Request Timeout", 425: "Too Early",
                                                         429: "Too Many Requests", 500: "Internal Server Error",
                                                         503: "Service Unavailable"}[status]


@pytest.mark.parametrize("status", [400, 403, 404, 410])
def test_slack_rejections_posted_nothing_and_are_final(receiver: RecordingServer, status: int) -> None:
    """Slack answers a refused post (invalid_payload, action_prohibited, no_service, channel_is_archived)
    with a 4xx and posts nothing: not started, so the queue makes it dead at once, never unknown."""
    delivery = slack(receiver.url(f"/status/{status}")).send(message(), None, 5_000)
    failed(delivery, "permanent_rejection", started=False)
    assert delivery.error is not None and "nothing was posted" in delivery.error


def test_a_rejected_post_is_dead_at_once_not_unknown(engine: Engine, receiver: RecordingServer) -> None:
    reach = _reach(engine, receiver.url("/status/404"))
    try:
        queue_id = _queued(engine, reach)
        _round(engine, reach)
        entry = reach.queue.get(queue_id)
        assert entry is not None and entry.status == "dead" and entry.last_failure == "permanent_rejection"
        assert len(receiver.requests) == 1
    finally:
        reach.close()


def test_slack_refused_connection_is_not_started(closed_port: int) -> None:
    delivery = slack(f"http://127.0.0.1:{closed_port}/{HOOK_PATH}").send(message(), None, 5_000)
    failed(delivery, "provider_unavailable", started=False)


def test_slack_connection_lost_or_deadline_after_sending_is_started(receiver: RecordingServer) -> None:
    failed(slack(receiver.url(f"/drop/{HOOK_PATH}")).send(message(), None, 5_000), "transient_failure", True)
    started = time.monotonic()
    delivery = slack(receiver.url("/slow/5"), timeout_ms=1_000).send(message(), None, 60_000)
    failed(delivery, "transient_failure", started=True)
    assert "timeout after 1000 ms" in (delivery.error or "") and time.monotonic() - started < 4.5


def test_slack_with_no_time_left_sends_nothing(receiver: RecordingServer) -> None:
    failed(slack(receiver.url("/ok")).send(message(), None, 0), "transient_failure", started=False)
    assert not receiver.requests


# --- settings -----------------------------------------------------------------------------

SLACK = {"name": "chat", "type": "slack", "url": "https://hooks.slack.com/" + HOOK_PATH}

INVALID: list[tuple[dict[str, Any], str]] = [  # (changes, the field the error names)
    ({"url": None}, "providers.chat.url"), ({"url": ""}, "providers.chat.url"), ({"url": 5}, "providers.chat.url"),
    ({"url": f"ftp://hooks.slack.com/{HOOK_PATH}"}, "providers.chat.url"),
    ({"url": "https://"}, "providers.chat.url"),
    ({"url": f"https://hooks.slack.com/{HOOK_PATH} x"}, "providers.chat.url"),
    ({"url": f"https://hooks.slack.com:99999/{HOOK_PATH}"}, "providers.chat.url"),
    ({"channel": ""}, "providers.chat.channel"), ({"channel": 7}, "providers.chat.channel"),
    ({"channel": "#ops\nx"}, "providers.chat.channel"), ({"channel": "#" + "o" * 256}, "providers.chat.channel"),
    ({"channel": " #ops"}, "providers.chat.channel"),
    ({"username": ""}, "providers.chat.username"), ({"username": ["bot"]}, "providers.chat.username"),
    ({"username": "bot\u202e"}, "providers.chat.username"), ({"username": "b" * 257}, "providers.chat.username"),
    ({"timeout_ms": 999}, "providers.chat.timeout_ms"), ({"timeout_ms": 86_400_001}, "providers.chat.timeout_ms"),
    ({"timeout_ms": "5000"}, "providers.chat.timeout_ms"), ({"timeout_ms": True}, "providers.chat.timeout_ms"),
    # a typo in every setting is named, not ignored
    ({"url": None, "ulr": SLACK["url"]}, "providers.chat.ulr"),
    ({"webhook_url": SLACK["url"]}, "providers.chat.webhook_url"),
    ({"chanel": "#ops"}, "providers.chat.chanel"), ({"user_name": "bot"}, "providers.chat.user_name"),
    ({"timeout": 5_000}, "providers.chat.timeout"), ({"headers": {"X-A": "1"}}, "providers.chat.headers"),
    ({"idempotent": True}, "providers.chat.idempotent"),
]


@pytest.mark.parametrize(("changes", "field"), INVALID, ids=[f"{f}={c}"[:60] for c, f in INVALID])
def test_every_invalid_setting_is_refused_naming_its_field(changes: dict[str, Any], field: str) -> None:
    config = {key: value for key, value in {**SLACK, **changes}.items() if value is not None}
    with pytest.raises(ReachConfigError) as caught:
        build_providers([config], environ={})
    assert caught.value.field == field and str(caught.value).startswith(f"hai:reach:012 {field}: ")
    assert TOKEN not in str(caught.value)


def test_a_misspelt_setting_lists_the_known_ones() -> None:
    with pytest.raises(ReachConfigError) as caught:
        build_provider({**SLACK, "chanel": "#ops"}, environ={})
    assert "known: channel, timeout_ms, url, username" in str(caught.value)


def test_every_command_refuses_a_bad_setting_before_it_starts() -> None:
    """``HAI_REACH_CONFIG`` is checked with the other settings (scheduler_core/settings.py)."""
    with pytest.raises(ReachConfigError) as caught:
        check_reach({"providers": [{**SLACK, "chanel": "#ops"}]}, "HAI_REACH_CONFIG", environ={})
    assert str(caught.value).startswith("hai:reach:012 HAI_REACH_CONFIG: providers.chat.chanel: is not a setting")
    assert TOKEN not in str(caught.value)


def test_defaults_and_the_masked_snapshot() -> None:
    provider = build_provider(SLACK, environ={})
    assert provider.idempotent is False
    assert provider.snapshot() == {"name": "chat", "type": "slack", "url": "https://hooks.slack.com/***",
                                   "channel": None, "username": None, "timeout_ms": 30_000}
    full = build_provider({**SLACK, "url": f"https://bot:pw-{TOKEN}@chat.example:8443/hooks/{TOKEN}?x=1",
                           "channel": "town-square", "username": "robot", "timeout_ms": 5_000}, environ={})
    snapshot = full.snapshot()
    assert snapshot["url"] == "https://chat.example:8443/***"
    assert (snapshot["channel"], snapshot["username"], snapshot["timeout_ms"]) == ("town-square", "robot", 5_000)
    for shown in (json.dumps(provider.snapshot()), json.dumps(snapshot), repr(provider), repr(full)):
        assert TOKEN not in shown and "T0123ABCD" not in shown


@pytest.mark.parametrize("to", ["#ops", "ops-team", "@alice", "张三", "a b"])
def test_any_printable_recipient_is_accepted(to: str) -> None:
    build_provider(SLACK, environ={}).validate_recipient(to)


@pytest.mark.parametrize("to", ["", " #ops", "#ops ", "a\nb", "x" * 513, "\u202eevil"])
def test_a_recipient_that_is_not_printable_text_is_refused_and_nothing_is_sent(receiver: RecordingServer,
                                                                               to: str) -> None:
    provider = slack(receiver.url("/ok"))
    with pytest.raises(InvalidRecipientError) as caught:
        provider.validate_recipient(to)
    assert caught.value.code == "hai:reach:004" and (not to.strip() or to.strip() not in str(caught.value))
    failed(provider.send(message(to=to), None, 5_000), "invalid_message", started=False)
    assert not receiver.requests


# --- through Reach and the durable queue, on every database --------------------------------


def _reach(engine: Engine, url: str, **queue: Any) -> Reach:
    reach = Reach(engine, {
        "providers": [{"name": "chat", "type": "slack", "url": url, "username": "hai"}],
        "templates": [{"name": "alert", "provider": "chat", "subject": "[{event}] {task}", "body": "{error}"}],
        "queue": {"retry_delay_ms": 1_000, "max_retry_delay_ms": 4_000, "max_attempts": 2, **queue},
    }, node_id="slack-test")
    reach.init()
    return reach


def _queued(engine: Engine, reach: Reach) -> str:
    queue_id = str(uuid.uuid4())
    QueueRepository(engine, "test", 60_000).enqueue(queue_id, "chat", "alert", "#ops", "[failed] backup",
                                                    "exit 3", {}, (2, 1_000, 4_000), None)
    return queue_id


def _round(engine: Engine, reach: Reach) -> None:
    set_clock_offset(engine, clock_offset(engine) + HOUR_MS)  # past any backoff
    reach.run_round()


def test_a_queued_message_is_posted_once(engine: Engine, receiver: RecordingServer) -> None:
    reach = _reach(engine, receiver.url(f"/ok/{HOOK_PATH}"))
    try:
        queue_id = _queued(engine, reach)
        _round(engine, reach)
        _round(engine, reach)
        entry = reach.queue.get(queue_id)
        assert entry is not None and entry.status == "sent" and entry.message_id
        [request] = receiver.requests
        assert request.json() == {"text": "[failed] backup\nexit 3", "username": "hai"}
    finally:
        reach.close()


def test_an_answer_that_may_have_been_posted_is_unknown_and_never_posted_again(
        engine: Engine, receiver: RecordingServer) -> None:
    reach = _reach(engine, receiver.url("/status/500"))
    try:
        queue_id = _queued(engine, reach)
        _round(engine, reach)
        _round(engine, reach)
        entry = reach.queue.get(queue_id)
        assert entry is not None and entry.status == "unknown" and entry.attempt_count == 1
        assert entry.last_error == "transient_failure: HTTP 500 Internal Server Error"
        assert len(receiver.requests) == 1
    finally:
        reach.close()


def test_a_refused_connection_is_retried_then_dead_with_the_url_kept_secret(engine: Engine,
                                                                            closed_port: int) -> None:
    reach = _reach(engine, f"http://robot:pw-{TOKEN}@127.0.0.1:{closed_port}/{HOOK_PATH}")
    try:
        queue_id = _queued(engine, reach)
        _round(engine, reach)
        entry = reach.queue.get(queue_id)
        assert entry is not None and entry.status == "pending"  # nothing was sent: safe to try again
        _round(engine, reach)
        entry = reach.queue.get(queue_id)
        assert entry is not None and entry.status == "dead" and entry.last_failure == "attempts_exhausted"
        assert entry.last_error.startswith("provider_unavailable: not connected:")
        assert TOKEN not in entry.last_error
        assert TOKEN not in json.dumps(reach.config) and TOKEN not in json.dumps(reach.provider_snapshots())
    finally:
        reach.close()


def test_an_immediate_send_renders_the_template_and_a_refusal_raises(engine: Engine,
                                                                     receiver: RecordingServer) -> None:
    reach = _reach(engine, receiver.url(f"/ok/{HOOK_PATH}"))
    try:
        result = reach.send({"template": "alert", "to": "#ops",
                             "vars": {"event": "execution.failed", "task": "backup", "error": "exit 3"}})
        assert result.provider == "chat" and result.message_id and not result.deferred
        assert receiver.requests[-1].json()["text"] == "[execution.failed] backup\nexit 3"
    finally:
        reach.close()
    refused = _reach(engine, receiver.url("/status/404"))
    try:
        with pytest.raises(DeliveryRejectedError) as caught:
            refused.send({"provider": "chat", "to": "#ops", "body": "hello"})
        assert caught.value.details["failure_class"] == "permanent_rejection" and TOKEN not in str(caught.value)
    finally:
        refused.close()
