"""The provider interface of the notification module ("reach").

A provider delivers one rendered message and says what happened in a way the delivery queue
can act on: was it delivered, and if not, could the request have reached the provider
(``started``) and what kind of failure it was (``failure_class``). Providers know nothing of
the database or the queue.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

FailureClass = Literal["provider_unavailable", "invalid_message", "permanent_rejection", "transient_failure",
                       "attempts_exhausted"]


@dataclass(frozen=True)
class RenderedMessage:
    """What a provider sends: templates are already rendered."""

    to: str
    subject: str | None
    body: str
    extra: dict[str, Any] = field(default_factory=dict)  # provider extension fields (e.g. SMS template code)


@dataclass(frozen=True)
class Delivery:
    """The outcome of one delivery attempt."""

    sent: bool
    message_id: str | None = None  # the provider's id when sent
    failure_class: FailureClass | None = None  # when not sent
    started: bool = False  # the request may have reached the provider (ambiguous if not sent)
    error: str | None = None  # short, never a response body, recipient or secret


class Provider(Protocol):
    name: str
    type: str  # a key of providers._TYPES: smtp | api | slack | pagerduty | aliyun-sms | console
    idempotent: bool  # the receiver deduplicates by the key send() is given (an api provider declared so, pagerduty)

    def validate_recipient(self, to: str) -> None:
        """Raise InvalidRecipientError when ``to`` cannot be an address of this provider."""

    def send(self, message: RenderedMessage, idempotency_key: str | None, timeout_ms: int) -> Delivery:
        """Deliver once. Never raises for delivery failures: they are in the Delivery."""

    def snapshot(self) -> dict[str, Any]:
        """The provider's configuration with every secret masked."""
