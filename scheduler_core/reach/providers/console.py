"""``type: console``: a stand-in provider for development. It logs metadata only (masked
recipient, lengths; never the subject or body) and always "succeeds", so production refuses it
(docs/executors-and-providers.md)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from scheduler_core.errors import InvalidRecipientError
from scheduler_core.reach.base import Delivery, RenderedMessage
from scheduler_core.reach.providers._config import Settings, has_unprintable, mask_recipient, refuse_recipient
from scheduler_core.reach.providers._delivery import delivered, new_message_id, not_started

SETTINGS: tuple[str, ...] = ()
RECIPIENT_MAX = 512
logger = logging.getLogger("scheduler_core.reach.console")


@dataclass(eq=False)
class ConsoleProvider:
    """Logs that a message would have been sent (metadata only) and reports it sent."""

    name: str
    type: str = field(default="console", init=False)
    idempotent: bool = field(default=False, init=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> ConsoleProvider:
        return cls(name=settings.name)

    def validate_recipient(self, to: str) -> None:
        if not isinstance(to, str) or not 1 <= len(to) <= RECIPIENT_MAX or has_unprintable(to):
            refuse_recipient(self.name, f"1..{RECIPIENT_MAX} printable characters")

    def send(self, message: RenderedMessage, idempotency_key: str | None, timeout_ms: int) -> Delivery:
        try:
            self.validate_recipient(message.to)
        except InvalidRecipientError:
            return not_started("invalid_message", "invalid recipient")
        message_id = new_message_id()
        logger.info("console provider %s: message %s to %s (subject %d chars, body %d chars; content not logged)",
                    self.name, message_id, mask_recipient(message.to), len(message.subject or ""),
                    len(message.body))
        return delivered(message_id)

    def snapshot(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type}
