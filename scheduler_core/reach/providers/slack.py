"""``type: slack``: a Slack (or Mattermost) incoming webhook. One JSON POST of ``{"text": ...}`` per
delivery, under one deadline, classified as the ``api`` webhook's answers are.

The webhook URL is the credential: whoever has it can post, so it is never shown, logged or quoted.
Config, recipient rule and classification: docs/executors-and-providers.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from scheduler_core.errors import InvalidRecipientError
from scheduler_core.masking import MASK
from scheduler_core.reach.base import Delivery, RenderedMessage
from scheduler_core.reach.providers._config import Settings, has_unprintable, refuse_recipient
from scheduler_core.reach.providers._delivery import budget_ms, new_message_id, no_time_left, not_started
from scheduler_core.reach.providers._http import TRANSIENT_STATUSES, request_json, status_phrase, webhook_verdict

SETTINGS = ("url", "channel", "username", "timeout_ms")
NAME_MAX = 256  # a channel or a display name
RECIPIENT_MAX = 512
_RECIPIENT_RULE = f"1..{RECIPIENT_MAX} printable characters without surrounding whitespace"


def slack_text(message: RenderedMessage) -> str:
    """The subject and the body on their own lines, with ``&``, ``<`` and ``>`` escaped as Slack
    asks: unescaped, a variable could write ``<!channel>`` (a mention of everyone) or a link."""
    text = f"{message.subject}\n{message.body}" if message.subject else message.body
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def masked_origin(url: str) -> str:
    """``https://host[:port]/***``: the URL's path and query are the credential, its userinfo too."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}/{MASK}"


@dataclass(eq=False)
class SlackProvider:
    """Posts each message's subject and body as the text of a chat webhook (docs/executors-and-providers.md)."""

    name: str
    url: str = field(repr=False)  # the credential itself
    channel: str | None = None  # overrides the webhook's channel where the server allows it
    username: str | None = None  # overrides the poster's display name where the server allows it
    timeout_ms: int = 30_000
    type: str = field(default="slack", init=False)
    idempotent: bool = field(default=False, init=False)  # an incoming webhook deduplicates nothing

    @classmethod
    def from_settings(cls, settings: Settings) -> SlackProvider:
        return cls(name=settings.name, url=settings.http_url("url"), channel=_name(settings, "channel"),
                   username=_name(settings, "username"), timeout_ms=settings.timeout_ms())

    def validate_recipient(self, to: str) -> None:
        if not isinstance(to, str) or not 1 <= len(to) <= RECIPIENT_MAX or to != to.strip() or has_unprintable(to):
            refuse_recipient(self.name, _RECIPIENT_RULE)

    def payload(self, message: RenderedMessage) -> dict[str, str]:
        """What is posted: the text, and the channel and user name when configured (never ``to``)."""
        payload = {"text": slack_text(message)}
        if self.channel is not None:
            payload["channel"] = self.channel
        if self.username is not None:
            payload["username"] = self.username
        return payload

    def send(self, message: RenderedMessage, idempotency_key: str | None, timeout_ms: int) -> Delivery:
        try:
            self.validate_recipient(message.to)
        except InvalidRecipientError:
            return not_started("invalid_message", "invalid recipient")
        budget = budget_ms(self.timeout_ms, timeout_ms)
        if budget is None:
            return no_time_left()
        parts = urlsplit(self.url)
        answer = request_json("POST", self.url, timeout_ms=budget, json_body=self.payload(message),
                              scrub=[self.url, parts.path, parts.password, message.to])
        status = answer.status
        if status is not None and 400 <= status < 500 and status not in TRANSIENT_STATUSES:
            # Slack answers a refused post with a 4xx and an error code (invalid_payload, no_service,
            # channel_not_found, action_prohibited, ...) and posts nothing: a definite rejection, dead
            # at once rather than unknown. A plain webhook cannot know that (webhook_verdict).
            return not_started("permanent_rejection", f"HTTP {status} {status_phrase(status)}: Slack rejected the "
                                                      "post; nothing was posted")
        return webhook_verdict(answer, budget, lambda data: new_message_id())

    def snapshot(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "url": masked_origin(self.url), "channel": self.channel,
                "username": self.username, "timeout_ms": self.timeout_ms}


def _name(settings: Settings, key: str) -> str | None:
    value = settings.text(key, max_length=NAME_MAX)
    if value is not None and value != value.strip():
        settings.fail(key, "must not begin or end with whitespace")
    return value
