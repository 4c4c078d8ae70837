"""Pure rules of the notification module: backoff, verdicts, DND window, templates, config bounds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler_core.errors import ReachConfigError, TemplateRenderFailedError
from scheduler_core.reach.base import Delivery
from scheduler_core.reach.config import DndConfig, QueuePolicy, ReachConfig, backoff_ms
from scheduler_core.reach.dnd import in_window, window_end_ms
from scheduler_core.reach.queue import decide
from scheduler_core.reach.templates import render
from scheduler_core.store.reach_queue_pages import QueueEntry


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def _entry(attempt_count: int, max_attempts: int = 5) -> QueueEntry:
    return QueueEntry("q", "p", None, "sending", attempt_count, max_attempts, 60_000, 3_600_000, 0, None, None, None,
                      0, 0)


def test_backoff_doubles_up_to_the_cap() -> None:
    assert [backoff_ms(60_000, 3_600_000, n) for n in range(1, 9)] == [
        60_000, 120_000, 240_000, 480_000, 960_000, 1_920_000, 3_600_000, 3_600_000]


@pytest.mark.parametrize(
    ("delivery", "idempotent", "attempts", "expected"),
    [
        (Delivery(sent=True, message_id="m"), False, 1, ("sent", None)),
        (Delivery(sent=False, failure_class="invalid_message"), True, 1, ("dead", "invalid_message")),
        (Delivery(sent=False, failure_class="transient_failure", started=True), False, 1,
         ("unknown", "transient_failure")),
        (Delivery(sent=False, failure_class="permanent_rejection", started=True), False, 1,
         ("unknown", "permanent_rejection")),
        (Delivery(sent=False, failure_class="permanent_rejection", started=True), True, 1,
         ("dead", "permanent_rejection")),
        (Delivery(sent=False, failure_class="transient_failure", started=True), True, 2,
         ("pending", "transient_failure")),
        (Delivery(sent=False, failure_class="provider_unavailable"), False, 1, ("pending", "provider_unavailable")),
        (Delivery(sent=False, failure_class="provider_unavailable"), False, 5, ("dead", "attempts_exhausted")),
    ],
)
def test_verdicts(delivery: Delivery, idempotent: bool, attempts: int, expected: tuple[str, str | None]) -> None:
    verdict = decide(delivery, idempotent, _entry(attempts))
    assert (verdict.status, verdict.last_failure) == expected
    if verdict.status == "pending":
        assert verdict.retry_in_ms == backoff_ms(60_000, 3_600_000, attempts)


def test_dnd_window_crossing_midnight_in_a_timezone() -> None:
    dnd = DndConfig(enabled=True, strategy="delay", start="22:00", end="08:00", timezone="Europe/Berlin")
    assert in_window(dnd, _ms("2026-11-29T21:30:00"))  # 22:30 Berlin
    assert in_window(dnd, _ms("2026-11-30T06:59:00"))  # 07:59 Berlin
    assert not in_window(dnd, _ms("2026-11-30T07:00:00"))  # 08:00 Berlin: over
    assert not in_window(dnd, _ms("2026-11-29T12:00:00"))
    assert window_end_ms(dnd, _ms("2026-11-29T21:30:00")) == _ms("2026-11-30T07:00:00")
    assert window_end_ms(dnd, _ms("2026-11-30T06:00:00")) == _ms("2026-11-30T07:00:00")
    same_day = DndConfig(enabled=True, start="12:00", end="13:30")
    assert in_window(same_day, _ms("2026-11-29T13:29:00")) and not in_window(same_day, _ms("2026-11-29T13:30:00"))
    assert not in_window(DndConfig(enabled=False), _ms("2026-11-29T23:00:00"))


def test_templates_render_or_fail_loudly() -> None:
    assert render("Code {code}, valid {minutes} min {{literal}}", {"code": "123456", "minutes": 5}, "t") == \
        "Code 123456, valid 5 min {literal}"
    with pytest.raises(TemplateRenderFailedError) as info:
        render("Hello {name}, code {code}", {"name": "x"}, "template otp body")
    assert info.value.code == "hai:reach:003" and "code" in str(info.value)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"queue": {"max_attempts": 0}}, "queue.max_attempts"),
        ({"queue": {"max_attempts": 101}}, "queue.max_attempts"),
        ({"queue": {"retry_delay_ms": 999}}, "queue.retry_delay_ms"),
        ({"queue": {"retry_delay_ms": 86_400_001}}, "queue.retry_delay_ms"),
        ({"queue": {"max_retry_delay_ms": 999}}, "queue.max_retry_delay_ms"),
        ({"queue": {"concurrency": 0}}, "queue.concurrency"),
        ({"queue": {"concurrency": 33}}, "queue.concurrency"),
        ({"queue": {"concurrency": "4"}}, "queue.concurrency"),
        ({"queue": {"retry_delay_ms": 60_000, "max_retry_delay_ms": 30_000}}, "queue.max_retry_delay_ms"),
        ({"queue": {"retries": 3}}, "queue.retries"),
        ({"dnd": {"strategy": "hold"}}, "dnd.strategy"),
        ({"dnd": {"start": "25:00"}}, "dnd.start"),
        ({"dnd": {"end": "8:00"}}, "dnd.end"),
        ({"dnd": {"start": "08:00", "end": "08:00"}}, "dnd.end"),
        ({"dnd": {"timezone": "Mars/Base"}}, "dnd.timezone"),
        ({"dnd": {"enabled": "yes"}}, "dnd.enabled"),
        ({"templates": [{"name": "t", "provider": "p", "body": ""}]}, "templates.t.body"),
        ({"templates": [{"name": "t", "provider": "p", "body": "b", "html": "x"}]}, "templates[0].html"),
        ({"channels": []}, "reach.channels"),
    ],
)
def test_config_bounds_name_the_field(values: dict[str, Any], field: str) -> None:
    with pytest.raises(ReachConfigError) as info:
        ReachConfig.parse(values)
    assert info.value.field == field and info.value.code == "hai:reach:012"


def test_defaults_follow_the_seed() -> None:
    policy = QueuePolicy()
    assert (policy.max_attempts, policy.retry_delay_ms, policy.max_retry_delay_ms) == (5, 60_000, 3_600_000)
