"""What a value of the JSON API may be, said once for the server and for the document.

A ``Checked`` annotation on a model field or a handler's path argument names the core's own
check (``scheduler_core.validation.check_id``, ``check_text``, ``check_cursor``, ...): the
server validates with it, with the core's code and field, as the pages do. Beside it, the JSON
Schema the OpenAPI document publishes, built from the same constants (``ID_MAX``, ``MAX_MS``,
the control characters and Python's whitespace, which ``str.strip`` removes).
tests/webapp/test_api_rules.py proves each schema accepts exactly what its check accepts, and
tests/webapp/test_api_schemathesis.py fuzzes the served API against the document.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BeforeValidator, GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from scheduler_core.errors import ConfigError, ReachConfigError
from scheduler_core.runtime.accounts import MAX_REASON
from scheduler_core.runtime.execution_operations import check_cursor
from scheduler_core.validation import (
    GROUP_MAX,
    ID_MAX,
    MAX_MS,
    TEAM_MAX,
    check_group,
    check_id,
    check_team,
    check_text,
    fail,
)

Check = Callable[[Any, str], Any]


class Checked:
    """The core's ``check(value, field)`` on the server; ``schema`` in the document."""

    def __init__(self, check: Check, **schema: Any) -> None:
        self.check, self.schema = check, schema

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        def validate(value: Any, info: ValidationInfo) -> Any:
            # The core's error goes out as it is (it is no ValueError): its code and field reach the problem.
            self.check(value, info.field_name or (info.context or {}).get("field", "value"))
            return value

        return core_schema.with_info_after_validator_function(validate, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        document = handler(schema)
        document.update(self.schema)
        return document


# --- the characters the checks refuse, as regular-expression classes ----------------------------

CONTROL = "\\u0000-\\u001f\\u007f"  # check_id: no control characters (validation._CONTROL)
# What str.strip() removes, so what a non-blank check looks through; every one is in the BMP.
def _class(chars: list[str]) -> str:
    """``chars`` (sorted) as the inside of a character class, runs as ranges: ``\\u0009-\\u000d``."""
    runs: list[list[int]] = []
    for code in map(ord, chars):
        if runs and runs[-1][1] == code - 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    return "".join(f"\\u{low:04x}" + (f"-\\u{high:04x}" if high > low else "") for low, high in runs)


WHITESPACE = _class([c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()])
NOT_BLANK = f"(?![{WHITESPACE}]*$)"  # at least one character str.strip() keeps
NO_NUL = "\\u0000"
SINGLE_LINE = "\\u0000\\n\\r"


def _digits_at_most(limit: int) -> str:
    """ASCII digits (leading zeros allowed) of at most ``len(str(limit))`` places, their value at most ``limit``."""
    top = str(limit)
    options = [f"[0-9]{{1,{len(top) - 1}}}"] if len(top) > 1 else []
    for place, digit in enumerate(top):
        if digit != "0":
            options.append(f"{top[:place]}[0-{int(digit) - 1}][0-9]{{{len(top) - place - 1}}}")
    options.append(top)
    return "(?:" + "|".join(options) + ")"


MS_DIGITS = _digits_at_most(MAX_MS)
SEGMENT = f"(?:[^{CONTROL}/.][^{CONTROL}/]*|\\.[^{CONTROL}/.][^{CONTROL}/]*|\\.\\.[^{CONTROL}/]+)"  # not "", ".", ".."
UUID_PATTERN = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
_UUID = re.compile(UUID_PATTERN)


def _stripped(inner: str, longest: int) -> str:
    """Text that, stripped, is empty or ``longest`` characters at most of ``[^inner]`` (what a
    handler strips before the core checks it)."""
    keep = f"[^{inner}{WHITESPACE}]"
    return f"^[{WHITESPACE}]*(?:{keep}(?:[^{inner}]{{0,{longest - 2}}}{keep})?)?[{WHITESPACE}]*$"


# --- the checks -----------------------------------------------------------------------------------


def check_path_id(value: Any, field: str) -> str:
    """An id in a URL path: ``check_id`` with ``url_path`` (no empty, ``.`` or ``..`` segment)."""
    return check_id(value, field, url_path=True)


def check_segment_id(value: Any, field: str) -> str:
    """An id that is one segment of a URL path (Flask's default converter matches no ``/``)."""
    if isinstance(value, str) and "/" in value:
        fail(ConfigError, field, "must not contain / (it is one part of the URL path)")
    return check_path_id(value, field)


def check_queue_id(value: Any, field: str) -> str:
    """A queue receipt: a UUID in its usual 8-4-4-4-12 hexadecimal form."""
    if not isinstance(value, str) or not _UUID.match(value):
        fail(ReachConfigError, field,
             f"must be a queue receipt UUID, 8-4-4-4-12 hexadecimal digits (got {value!r:.80})")
    return value


def check_queue_cursor(value: Any, field: str) -> str:
    """``<updated_at>.<queue_id>``, as a page of deliveries names the next one."""
    at, dot, queue_id = value.partition(".") if isinstance(value, str) else ("", "", "")
    if not dot or not re.fullmatch(MS_DIGITS, at) or not _UUID.match(queue_id):
        fail(ReachConfigError, field, f"must be a page cursor <updated_at>.<queue_id> (got {value!r:.80})")
    return value  # type: ignore[no-any-return]


def check_stripped_id(value: Any, field: str) -> str:
    """An id the handler strips first (blank: none given), as an idempotency key or a source."""
    stripped = value.strip() if isinstance(value, str) else value
    return value if stripped == "" else check_id(stripped, field)  # type: ignore[no-any-return]


def check_message_id(value: Any, field: str) -> str:
    """The provider's message id, stripped (blank: none): one line, 255 characters at most."""
    stripped = value.strip() if isinstance(value, str) else value
    return value if stripped == "" else check_text(stripped, field, 255, ReachConfigError, single_line=True)


def _id_schema(pattern: str, longest: int = ID_MAX) -> dict[str, Any]:
    return {"minLength": 1, "maxLength": longest, "pattern": pattern}


def _text_check(longest: int, *, single_line: bool = False, blank: bool = False) -> Check:
    return lambda value, field: check_text(value, field, longest, single_line=single_line, blank=blank)


# --- the types ------------------------------------------------------------------------------------

Id = Annotated[str, Checked(check_id, **_id_schema(f"^{NOT_BLANK}[^{CONTROL}]*$"))]
PathId = Annotated[str, Checked(check_path_id, **_id_schema(f"^{NOT_BLANK}{SEGMENT}(?:/{SEGMENT})*$"),
                                description="1-128 characters, no control character; / only between "
                                            "non-empty parts that are not . or ..")]
SegmentId = Annotated[str, Checked(check_segment_id, **_id_schema(f"^{NOT_BLANK}{SEGMENT}$"),
                                   description="1-128 characters, no control character, no /, not . or ..")]
Group = Annotated[str, Checked(check_group, **_id_schema(f"^{NOT_BLANK}[^{CONTROL}]*$", GROUP_MAX))]
Team = Annotated[str, Checked(check_team, **_id_schema("^[a-z0-9][a-z0-9-]*$", TEAM_MAX),
                              description="a team id: lower-case letters, digits and -")]
QueueReceipt = Annotated[str, Checked(check_queue_id, format="uuid", pattern=UUID_PATTERN)]
JournalCursor = Annotated[str, Checked(
    check_cursor, pattern=f"^{MS_DIGITS}\\.{NOT_BLANK}[^{CONTROL}]{{1,{ID_MAX}}}$",
    description="<ms>.<id>: a cursor from the previous answer")]
QueueCursor = Annotated[str, Checked(
    check_queue_cursor, pattern=f"^{MS_DIGITS}\\.{UUID_PATTERN[1:]}",
    description="<updated_at>.<queue_id>: a cursor from the previous answer")]
Reason = Annotated[str, Checked(_text_check(MAX_REASON), minLength=1, maxLength=MAX_REASON,
                                pattern=f"^{NOT_BLANK}[^{NO_NUL}]*$",
                                description="required: what was checked, and why")]
StrippedId = Annotated[str, Checked(check_stripped_id, pattern=_stripped(CONTROL, ID_MAX),
                                    description="1-128 characters once stripped, no control character; "
                                                "blank: none")]
MessageId = Annotated[str, Checked(check_message_id, pattern=_stripped(SINGLE_LINE, 255),
                                   description="the provider's id, one line of 255 characters at most once "
                                               "stripped, only with \"sent\"; blank: none")]


def text(longest: int, *, single_line: bool = False, blank: bool = False) -> Any:
    """``check_text(value, field, longest, ...)``'s rule as a type."""
    refused = SINGLE_LINE if single_line else NO_NUL
    pattern = f"^{'' if blank else NOT_BLANK}[^{refused}]*$"
    return Annotated[str, Checked(_text_check(longest, single_line=single_line, blank=blank),
                                  minLength=0 if blank else 1, maxLength=longest, pattern=pattern)]


def _whole(value: Any) -> Any:
    """548.0 is the integer 548 in JSON (and in JSON Schema 2020-12): read it as one. Other
    floats, and booleans, are left for the strict integer check to refuse."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Whole = BeforeValidator(_whole)
