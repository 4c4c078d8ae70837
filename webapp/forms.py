"""Form fields several blueprints read the same way. They only turn text into values and say
what is missing; every rule about what a value may be is the core's.

WTForms is not used: each form here is a handful of fields whose errors come back from the
core by field name (``ConfigError.field``), its markup carries htmx attributes and ids the
pages and tests rely on, and the task form masks secrets both ways; declaring WTForms fields
would add a layer without removing any of that.
"""

from __future__ import annotations

from collections.abc import Sequence

from flask import request

from scheduler_core.runtime.accounts import MAX_REASON


def posted_version() -> int | None:
    """The row version (``updated_at``) the form was made on; None when missing or not a number."""
    return request.form.get("expected_updated_at", type=int)


def review_errors(status: str, outcomes: Sequence[str], reason: str, expected: int | None) -> dict[str, str]:
    """What a resolve form of an unknown outcome lacks: one of ``outcomes``, a reason (it goes
    into the audit trail), and the version of the row it was made on."""
    errors = {}
    if status not in outcomes:
        errors["status"] = f"Choose {' or '.join(outcomes)}."
    if not reason:
        errors["reason"] = "A reason is required: say what you checked."
    elif len(reason) > MAX_REASON:
        errors["reason"] = f"Keep the reason under {MAX_REASON} characters."
    if expected is None:
        errors["expected_updated_at"] = "The page is missing the row version; reload it."
    return errors
