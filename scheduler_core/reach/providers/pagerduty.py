"""``type: pagerduty``: PagerDuty Events API v2. One JSON POST of a ``trigger`` event per delivery,
under one deadline, its ``dedup_key`` the idempotency key the queue gives, so a re-send is one alert.

The routing key is the credential: whoever has it can page the service, so it is never shown, logged
or quoted. Config, recipient rule and classification: docs/executors-and-providers.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from scheduler_core.errors import InvalidRecipientError
from scheduler_core.masking import MASK
from scheduler_core.reach.base import Delivery, RenderedMessage
from scheduler_core.reach.providers._config import Settings, has_unprintable, mask_endpoint, refuse_recipient
from scheduler_core.reach.providers._delivery import (
    ambiguous,
    budget_ms,
    delivered,
    new_message_id,
    no_time_left,
    not_started,
)
from scheduler_core.reach.providers._http import TRANSIENT_STATUSES, HttpAnswer, no_answer, request_json, status_phrase

SETTINGS = ("url", "routing_key", "source", "severity", "timeout_ms")
DEFAULT_URL = "https://events.pagerduty.com/v2/enqueue"
DEFAULT_SOURCE = "hai-scheduler"
SEVERITIES = ("critical", "error", "warning", "info")
DEFAULT_SEVERITY = "error"
SOURCE_MAX = 255
SUMMARY_MAX = 1_024  # PagerDuty's limit on payload.summary
DEDUP_KEY_MAX = 255  # PagerDuty's limit on dedup_key
EVENT_MAX_BYTES = 512 * 1_024  # PagerDuty's limit on one event
RECIPIENT_MAX = 512
ROUTING_KEY = re.compile(r"[A-Za-z0-9]{32}")  # an integration key (a ruleset's begins with R)
_RECIPIENT_RULE = (f"1..{RECIPIENT_MAX} printable characters without surrounding whitespace, and not a routing "
                   "key (it belongs in the provider's routing_key)")


def summary(message: RenderedMessage) -> str:
    """The subject, else the body's first non-blank line ("" when there is none); cut to PagerDuty's
    1024 characters, the last one then an ellipsis."""
    text = message.subject if message.subject and message.subject.strip() else next(
        (line for line in message.body.splitlines() if line.strip()), "")
    return text if len(text) <= SUMMARY_MAX else text[: SUMMARY_MAX - 1] + "…"


@dataclass(eq=False)
class PagerDutyProvider:
    """Triggers one PagerDuty alert per message (docs/executors-and-providers.md)."""

    name: str
    routing_key: str = field(repr=False)  # the credential itself
    url: str = field(default=DEFAULT_URL, repr=False)  # may hold credentials
    source: str = DEFAULT_SOURCE
    severity: str = DEFAULT_SEVERITY
    timeout_ms: int = 30_000
    type: str = field(default="pagerduty", init=False)
    idempotent: bool = field(default=True, init=False)  # PagerDuty folds triggers with one dedup_key

    @classmethod
    def from_settings(cls, settings: Settings) -> PagerDutyProvider:
        routing_key = settings.required_text("routing_key", max_length=64)
        if not ROUTING_KEY.fullmatch(routing_key):
            settings.fail("routing_key", "must be a PagerDuty integration key: 32 letters and digits")
        source = settings.text("source", default=DEFAULT_SOURCE, max_length=SOURCE_MAX) or DEFAULT_SOURCE
        if source != source.strip():
            settings.fail("source", "must not begin or end with whitespace")
        return cls(name=settings.name, routing_key=routing_key, url=settings.http_url("url", DEFAULT_URL),
                   source=source, severity=settings.choice("severity", SEVERITIES, DEFAULT_SEVERITY),
                   timeout_ms=settings.timeout_ms())

    def validate_recipient(self, to: str) -> None:
        if (not isinstance(to, str) or not 1 <= len(to) <= RECIPIENT_MAX or to != to.strip() or has_unprintable(to)
                or ROUTING_KEY.fullmatch(to)):
            refuse_recipient(self.name, _RECIPIENT_RULE)

    def event(self, message: RenderedMessage, dedup_key: str | None) -> dict[str, Any]:
        """What is posted: a trigger of the configured service (never ``to``, nor ``message.extra``)."""
        event: dict[str, Any] = {
            "routing_key": self.routing_key, "event_action": "trigger",
            "payload": {"summary": summary(message), "source": self.source, "severity": self.severity,
                        "custom_details": {"body": message.body}},
        }
        if dedup_key is not None:
            event["dedup_key"] = dedup_key
        return event

    def send(self, message: RenderedMessage, idempotency_key: str | None, timeout_ms: int) -> Delivery:
        try:
            self.validate_recipient(message.to)
        except InvalidRecipientError:
            return not_started("invalid_message", "invalid recipient")
        key = idempotency_key
        if key is not None and (not 1 <= len(key) <= DEDUP_KEY_MAX or has_unprintable(key) or not key.isascii()):
            return not_started("invalid_message", f"idempotency key must be 1..{DEDUP_KEY_MAX} printable ASCII "
                                                  "characters")
        event = self.event(message, key)
        if not event["payload"]["summary"]:
            return not_started("invalid_message", "no summary: the message has no subject and a blank body")
        try:
            size = len(json.dumps(event, ensure_ascii=False, allow_nan=False).encode("utf-8"))
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError (a lone surrogate) is a ValueError
            return not_started("invalid_message", f"message is not JSON-encodable ({type(exc).__name__})")
        if size > EVENT_MAX_BYTES:
            return not_started("invalid_message", f"the event is {size} bytes; PagerDuty takes at most "
                                                  f"{EVENT_MAX_BYTES}")
        budget = budget_ms(self.timeout_ms, timeout_ms)
        if budget is None:
            return no_time_left()
        answer = request_json("POST", self.url, timeout_ms=budget, json_body=event,
                              scrub=[self.routing_key, urlsplit(self.url).password, message.to])
        return _judge(answer, budget, key)

    def snapshot(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "url": mask_endpoint(self.url), "routing_key": MASK,
                "source": self.source, "severity": self.severity, "timeout_ms": self.timeout_ms}


def _judge(answer: HttpAnswer, budget: int, key: str | None) -> Delivery:
    """PagerDuty's answer: 202 ``{"status": "success"}`` is an alert; 400 (an invalid event) and other
    4xx created nothing; 429 and 5xx may follow an accepted event, and a re-send with its dedup_key
    is folded into the same alert, so they are started and the queue retries them."""
    status = answer.status
    if status is None:
        return no_answer(answer, budget)
    data = answer.data if isinstance(answer.data, dict) else {}
    text = f"HTTP {status} {status_phrase(status)}".strip()
    if 200 <= status < 300:
        if data.get("status") != "success":
            return ambiguous("transient_failure", f"{text} without a success status: PagerDuty's answer is "
                                                  "unreadable; the event may have been accepted")
        answered = data.get("dedup_key")  # PagerDuty's, when we sent none (an immediate send)
        if isinstance(answered, str) and 1 <= len(answered) <= DEDUP_KEY_MAX and answered.isprintable():
            return delivered(answered)
        return delivered(key or new_message_id())
    if status in TRANSIENT_STATUSES or status >= 500:
        return ambiguous("transient_failure", text)
    if 400 <= status < 500:
        return not_started("permanent_rejection", f"{text}: PagerDuty refused the event; no alert was created")
    return ambiguous("permanent_rejection", text)  # a 3xx, not followed; a 1xx
