"""The boundary: small validators every public entry point uses.

Each ``check_*`` takes a value and the field it came from, returns the value normalised, or
raises ``error(field, message)`` -- :class:`ConfigError` by default, ``ReachConfigError`` or
``DatabaseConfigError`` where the caller says so -- before any statement runs. The rules are the
ones all three databases can store and compare alike (docs/semantics.md, "Input").
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit

from scheduler_core.errors import ConfigError

FieldError = Callable[[str, str], Exception]  # ConfigError, ReachConfigError, DatabaseConfigError
S = TypeVar("S", bound=StrEnum)

ID_MAX = 128  # task ids, occurrence ids, idempotency keys, sources, node ids, names
GROUP_MAX = 64  # node groups
TEAM_MAX = 64  # team ids (docs/teams.md)
MAX_SAFE_INTEGER = 2**53 - 1  # what survives JSON and a BIGINT read as a double
MAX_MS = MAX_SAFE_INTEGER  # unix milliseconds
MAX_JSON_DEPTH = 32  # nesting of params, handlers, template variables
PAGE_LIMIT = 100
PAGE_OFFSET = 1_000_000
_CONTROL = {chr(c) for c in (*range(0x20), 0x7F)}


def fail(error: FieldError, field: str, message: str) -> NoReturn:
    raise error(field, message)


def check_int(value: Any, field: str, low: int, high: int, error: FieldError = ConfigError) -> int:
    """An integer (not a bool) in ``low..high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        fail(error, field, f"must be an integer between {low} and {high} (got {shown(value)})")
    return value


def check_optional_int(value: Any, field: str, low: int, high: int, error: FieldError = ConfigError) -> int | None:
    return None if value is None else check_int(value, field, low, high, error)


def check_ms(value: Any, field: str, error: FieldError = ConfigError) -> int:
    """Unix milliseconds: 0..2**53-1."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_MS:
        fail(error, field, f"must be unix milliseconds, an integer between 0 and {MAX_MS} (got {shown(value)})")
    return value


def check_optional_ms(value: Any, field: str, error: FieldError = ConfigError) -> int | None:
    return None if value is None else check_ms(value, field, error)


def check_bool(value: Any, field: str, error: FieldError = ConfigError) -> bool:
    if not isinstance(value, bool):
        fail(error, field, f"must be true or false (got {shown(value)})")
    return value


def check_text(value: Any, field: str, longest: int, error: FieldError = ConfigError, *,
               single_line: bool = False, blank: bool = False) -> str:
    """A string every database stores as given: at most ``longest`` characters, no NUL, no
    unpaired surrogate; not empty or blank unless ``blank``; no line break if ``single_line``."""
    if not isinstance(value, str):
        fail(error, field, f"must be a string (got {type(value).__name__})")
    if not blank and not value.strip():
        fail(error, field, "must be a non-empty string")
    if len(value) > longest:
        fail(error, field, f"must be at most {longest} characters (got {len(value)})")
    check_encodable(value, field, error)
    if single_line and ("\n" in value or "\r" in value):
        fail(error, field, "must be a single line (no CR or LF)")
    return value


def check_optional_text(value: Any, field: str, longest: int, error: FieldError = ConfigError, *,
                        single_line: bool = False) -> str | None:
    return None if value is None else check_text(value, field, longest, error, single_line=single_line)


def check_encodable(value: str, field: str, error: FieldError = ConfigError) -> str:
    """No NUL (PostgreSQL text and JSON cannot hold it) and no unpaired surrogate (not UTF-8)."""
    if "\x00" in value:
        fail(error, field, "must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        fail(error, field, "must be valid Unicode (it holds an unpaired surrogate)")
    return value


def check_id(value: Any, field: str, error: FieldError = ConfigError, *, url_path: bool = False) -> str:
    """An identifier or key: 1..128 characters, no control characters. Compared byte for byte
    on every database (leading and trailing spaces are part of it). ``url_path``: it also names
    a page (a new task's id), so it must pass ``check_url_path``."""
    check_text(value, field, ID_MAX, error)
    if any(char in _CONTROL for char in value):
        fail(error, field, "must not contain control characters (tab, line breaks, ...)")
    if url_path:
        check_url_path(value, field, error)
    return value  # type: ignore[no-any-return]


def check_url_path(value: str, field: str, error: FieldError = ConfigError) -> str:
    """A name the dashboard puts in a URL path as it is (``/tasks/view/<id>``): any text, ``/``
    included, except an empty, ``.`` or ``..`` segment between slashes -- a leading, trailing or
    double ``/``, ``a/./b`` -- which browsers and servers rewrite, so no URL could reach it."""
    if any(segment in ("", ".", "..") for segment in value.split("/")):
        fail(error, field, f"must not have an empty, '.' or '..' part between slashes: no URL reaches it "
                           f"(got {shown(value)})")
    return value


def check_optional_id(value: Any, field: str, error: FieldError = ConfigError) -> str | None:
    return None if value is None else check_id(value, field, error)


def check_group(value: Any, field: str, error: FieldError = ConfigError) -> str:
    """A node group name: an identifier of at most 64 characters."""
    check_id(value, field, error)
    if len(value) > GROUP_MAX:
        fail(error, field, f"must be at most {GROUP_MAX} characters (got {len(value)})")
    return value  # type: ignore[no-any-return]


_TEAM_ID = re.compile(r"[a-z0-9][a-z0-9-]*")


def check_team(value: Any, field: str, error: FieldError = ConfigError) -> str:
    """A team id: lower-case letters, digits and ``-``, starting with a letter or digit, at most 64."""
    check_text(value, field, TEAM_MAX, error)
    if not _TEAM_ID.fullmatch(value):
        fail(error, field, f"must be a team id: lower-case letters, digits and -, not first (got {shown(value)})")
    return value  # type: ignore[no-any-return]


def check_choice(value: Any, field: str, choices: type[S], error: FieldError = ConfigError) -> S:
    """A member of the StrEnum ``choices``, given as its string."""
    if not isinstance(value, str) or value not in choices._value2member_map_:
        fail(error, field, f"must be one of {', '.join(choices)} (got {shown(value)})")
    return choices(value)


def check_optional_choice(value: Any, field: str, choices: type[S], error: FieldError = ConfigError) -> S | None:
    return None if value is None else check_choice(value, field, choices, error)


def check_page(limit: Any, offset: Any, error: FieldError = ConfigError) -> tuple[int, int]:
    """An offset page: limit 1..100, offset 0..1000000."""
    return check_int(limit, "limit", 1, PAGE_LIMIT, error), check_int(offset, "offset", 0, PAGE_OFFSET, error)


def check_json(value: Any, field: str, error: FieldError = ConfigError, depth: int = 0) -> None:
    """What the JSON columns store faithfully on every database: strings without NUL or
    surrogates, finite numbers within 2**53-1, lists, objects with string keys; at most
    ``MAX_JSON_DEPTH`` levels."""
    if depth > MAX_JSON_DEPTH:
        fail(error, field, f"is nested more than {MAX_JSON_DEPTH} levels deep")
    if isinstance(value, str):
        check_encodable(value, field, error)
    elif value is None or isinstance(value, bool):
        return
    elif isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            fail(error, field, "integers beyond 2**53-1 do not survive JSON")
    elif isinstance(value, float):
        if not math.isfinite(value):
            fail(error, field, "NaN and infinity are not JSON")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            check_json(item, f"{field}[{index}]", error, depth + 1)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                fail(error, field, f"object keys must be strings (got {shown(key)})")
            check_encodable(key, field, error)
            check_json(item, f"{field}.{key}", error, depth + 1)
    else:
        fail(error, field, f"{type(value).__name__} is not JSON")


def check_json_object(value: Any, field: str, error: FieldError = ConfigError) -> dict[str, Any] | None:
    """None, or a JSON object (mapping) as a plain dict."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        fail(error, field, f"must be a JSON object (mapping) or None (got {type(value).__name__})")
    check_json(value, field, error)
    return dict(value)


def shown(value: Any) -> str:
    """A refused value as a message shows it: short, and never a huge or binary blob."""
    try:
        text = repr(value)
    except Exception:  # a huge int (str digits limit), a deep nest (RecursionError), a bad __repr__
        return f"a {type(value).__name__}"
    return text if len(text) <= 80 else f"{text[:77]}..."


def check_link(link: str | None, field: str) -> str | None:
    """None, or an http(s) URL (already checked as one line of text) that a page may link to: no
    other scheme (a ``javascript:`` link would run in the operator's browser)."""
    if link is None:
        return None
    try:
        parts = urlsplit(link)
    except ValueError as exc:
        raise ConfigError(field, f"is not a URL: {exc}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc or any(c.isspace() for c in link):
        raise ConfigError(field, f"must be an http:// or https:// URL without spaces (got {link[:80]!r})")
    return link


PARAMS_MAX_BYTES = 64 * 1024  # a task's params as compact UTF-8 JSON: stored in every journal read of the task


def check_params(value: Any, capped: bool = True) -> dict[str, Any] | None:
    """A task's params: None or a JSON object of at most PARAMS_MAX_BYTES serialized (ConfigError "params").
    ``capped=False`` reads a stored task: one saved before the cap existed still runs."""
    params = check_json_object(value, "params")
    if params is not None and capped:
        size = len(json.dumps(params, ensure_ascii=False, separators=(",", ":")).encode())
        if size > PARAMS_MAX_BYTES:
            raise ConfigError("params", f"must be at most {PARAMS_MAX_BYTES:,} bytes as JSON (got {size:,} bytes); "
                                        "keep large data elsewhere and pass a reference")
    return params
