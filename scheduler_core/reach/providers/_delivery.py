"""What every network provider shares: building Delivery values, the time a send may take, safe error text.

``started`` is the line the delivery queue acts on. ``started=False`` means the provider cannot have
received the message (no connection, or a definite refusal before the content was handed over), so
another attempt cannot duplicate it. ``started=True`` with ``sent=False`` is *ambiguous*: the message
may have been delivered without us seeing the answer, so the queue retries only what the receiver
deduplicates (idempotent api providers) and turns everything else into ``unknown`` for an operator.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable

from scheduler_core.masking import MASK
from scheduler_core.reach.base import Delivery, FailureClass
from scheduler_core.transport import root_cause

ERROR_MAX = 300
_QUERY = re.compile(r"\?[^\s'\")]*")  # a URL's query string: may hold a signature, a phone number, a body


def delivered(message_id: str) -> Delivery:
    return Delivery(sent=True, message_id=message_id)


def not_started(failure_class: FailureClass, error: str) -> Delivery:
    """A failure that cannot have delivered anything: safe to retry (or final, for a rejection)."""
    return Delivery(sent=False, failure_class=failure_class, started=False, error=error[:ERROR_MAX])


def ambiguous(failure_class: FailureClass, error: str) -> Delivery:
    """A failure after the message may have reached the provider."""
    return Delivery(sent=False, failure_class=failure_class, started=True, error=error[:ERROR_MAX])


def new_message_id() -> str:
    return uuid.uuid4().hex


def budget_ms(configured_ms: int, given_ms: int) -> int | None:
    """The time this send may take: the provider's timeout or the caller's, whichever is shorter.

    None when the caller has no time left (its lease is about to end): nothing should start.
    """
    if isinstance(given_ms, bool) or not isinstance(given_ms, int | float) or not given_ms >= 1:  # NaN too
        return None
    return int(min(configured_ms, given_ms))


def no_time_left() -> Delivery:
    return not_started("transient_failure", "no time left before the caller's deadline; nothing was sent")


def safe_error(exc: BaseException, scrub: Iterable[str | None] = ()) -> str:
    """``Type: detail`` of the innermost cause, with query strings and the given values cut out.

    The innermost cause is a socket or TLS error (``ConnectionRefusedError: Connection refused``),
    not a wrapper quoting the URL; ``scrub`` removes anything sensitive that may still be quoted
    (a password, a recipient, a secret).
    """
    root = root_cause(exc)
    detail = root.strerror if isinstance(root, OSError) and root.strerror else str(root)
    text = f"{type(root).__name__}: {detail}" if detail else type(root).__name__
    text = _QUERY.sub("?" + MASK, text)
    for value in scrub:
        if value and len(value) >= 4:  # shorter ones would mangle the text more than they could leak
            text = text.replace(value, MASK)
    return text[:200]
