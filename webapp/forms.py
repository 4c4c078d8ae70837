"""Form fields several blueprints read the same way. They only turn text into values and say
what is missing; every rule about what a value may be is the core's.

WTForms is not used: each form here is a handful of fields whose errors come back from the
core by field name (``ConfigError.field``), its markup carries htmx attributes and ids the
pages and tests rely on, and the task form masks secrets both ways; declaring WTForms fields
would add a layer without removing any of that.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import unquote

from flask import request

from scheduler_core.runtime.accounts import MAX_REASON
from scheduler_core.validation import check_ms

VERSION_FIELD = "expected_updated_at"
_NUMBER = re.compile(r"[+-]?[0-9]+")  # ASCII digits only: str.isdigit() also takes "²", which int() refuses
_LONGEST_NUMBER = 20  # longer digit strings are refused as they are, never converted


def whole_number(text: str) -> int | None:
    """``text`` as a whole number written in ASCII digits (at most 16 of them), else None."""
    text = text.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 16:
        return None
    return int(text)


def posted_version() -> int | None:
    """The row version (``updated_at``) the form was made on; None when it is missing or not a
    number (a broken page: the caller asks to reload). A number that is no unix ms -- negative,
    beyond 2**53-1, 40 digits -- is refused by the core's rule: ConfigError naming the field (400)."""
    text = request.form.get(VERSION_FIELD, "").strip()
    if _NUMBER.fullmatch(text) is None:
        return None
    return check_ms(int(text) if len(text) <= _LONGEST_NUMBER else text, VERSION_FIELD)


def review_errors(status: str, outcomes: Sequence[str], reason: str, expected: int | None) -> dict[str, str]:
    """What a resolve form of an unknown outcome lacks: one of ``outcomes``, a reason (it goes
    into the audit trail), and the version of the row it was made on."""
    errors = {}
    if status not in outcomes:
        errors["status"] = f"Choose {' or '.join(outcomes)}."
    if not reason:
        errors["reason"] = "A reason is required: say what you checked."
    elif "\x00" in reason:  # the audit trail could not store it, and the action would already be done
        errors["reason"] = "Remove the NUL character."
    elif len(reason) > MAX_REASON:
        errors["reason"] = f"Keep the reason under {MAX_REASON} characters."
    if expected is None:
        errors[VERSION_FIELD] = "The page is missing the row version; reload it."
    return errors


def posted(action: str, name: str) -> str:
    """What the request being answered posted in field ``name``, when it is the POST of the form
    whose action is ``action`` (else ""): a page re-rendered after a refused form shows the
    operator's choices and text again, on that form only. A template global."""
    if request.method != "POST" or unquote(action) != request.script_root + request.path:
        return ""
    return request.form.get(name, "")
