"""``type: api``: a webhook. One JSON POST per delivery, under one deadline.

Every answer after connecting is started; only an idempotent provider sends the idempotency key.
Config, recipient rule and classification: docs/executors-and-providers.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from scheduler_core.errors import InvalidRecipientError, ReachConfigError
from scheduler_core.masking import is_secret_name, mask_headers
from scheduler_core.reach.base import Delivery, RenderedMessage
from scheduler_core.reach.providers._config import (
    Settings,
    check_http_url,
    has_unprintable,
    mask_endpoint,
    refuse_recipient,
)
from scheduler_core.reach.providers._delivery import budget_ms, new_message_id, no_time_left, not_started
from scheduler_core.reach.providers._http import request_json, webhook_verdict

SETTINGS = ("url", "headers", "timeout_ms", "idempotent")
RESERVED_HEADERS = ("idempotency-key", "content-type", "content-length", "host", "transfer-encoding")
RECIPIENT_MAX = 512
KEY_MAX = 256
_RECIPIENT_RULE = f"1..{RECIPIENT_MAX} printable characters without surrounding whitespace"


def _message_id(data: Any) -> str | None:
    if isinstance(data, dict):
        for key in ("messageId", "id"):
            value = data.get(key)
            if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
                return str(value)[:KEY_MAX]
    return None


@dataclass(eq=False)
class WebhookProvider:
    """Posts each message as JSON to one URL (docs/executors-and-providers.md)."""

    name: str
    url: str = field(repr=False)  # may hold credentials
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    timeout_ms: int = 30_000
    idempotent: bool = False
    type: str = field(default="api", init=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> WebhookProvider:
        return cls(name=settings.name, url=settings.http_url("url"),
                   headers=settings.headers("headers", RESERVED_HEADERS),
                   timeout_ms=settings.timeout_ms(), idempotent=settings.boolean("idempotent", False))

    def validate_recipient(self, to: str) -> None:
        if not isinstance(to, str) or not 1 <= len(to) <= RECIPIENT_MAX or to != to.strip() or has_unprintable(to):
            refuse_recipient(self.name, _RECIPIENT_RULE)
        if to.lower().startswith(("http://", "https://")):
            try:
                check_http_url(to, "to")
            except ReachConfigError:
                refuse_recipient(self.name, "a valid URL with a host when it has an http(s) scheme")

    def _request(self, message: RenderedMessage, key: str | None) -> tuple[dict[str, Any], dict[str, str]]:
        payload: dict[str, Any] = {"to": message.to, "subject": message.subject, "body": message.body,
                                   "extra": message.extra}
        headers = dict(self.headers)
        if self.idempotent and key is not None:
            payload["idempotencyKey"] = key
            headers["Idempotency-Key"] = key
        json.dumps(payload, allow_nan=False)  # refuse what requests could not encode, before connecting
        return payload, headers

    def send(self, message: RenderedMessage, idempotency_key: str | None, timeout_ms: int) -> Delivery:
        try:
            self.validate_recipient(message.to)
        except InvalidRecipientError:
            return not_started("invalid_message", "invalid recipient")
        key = idempotency_key if self.idempotent else None
        if key is not None and (not 1 <= len(key) <= KEY_MAX or has_unprintable(key) or not key.isascii()):
            return not_started("invalid_message", f"idempotency key must be 1..{KEY_MAX} printable ASCII characters")
        try:
            payload, headers = self._request(message, key)
        except (TypeError, ValueError) as exc:
            return not_started("invalid_message", f"message is not JSON-encodable ({type(exc).__name__})")
        budget = budget_ms(self.timeout_ms, timeout_ms)
        if budget is None:
            return no_time_left()
        scrub = [value for name, value in self.headers.items() if is_secret_name(name)]
        answer = request_json("POST", self.url, timeout_ms=budget, headers=headers, json_body=payload,
                              scrub=[*scrub, urlsplit(self.url).password, message.to])
        return webhook_verdict(answer, budget, lambda data: _message_id(data) or key or new_message_id())

    def snapshot(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "url": mask_endpoint(self.url),
                "headers": mask_headers(self.headers), "timeout_ms": self.timeout_ms, "idempotent": self.idempotent}

