"""Reading one provider's configuration, and the recipient rules every provider type shares.

Every invalid value raises :class:`ReachConfigError` whose ``field`` is
``providers.<name>.<setting>``. Messages never quote a string value: it may be a password, a
token or a URL with credentials in it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Mapping
from typing import Any, NoReturn
from urllib.parse import urlsplit

from scheduler_core.errors import InvalidRecipientError, ReachConfigError
from scheduler_core.masking import mask_url
from scheduler_core.validation import check_bool, check_encodable, check_int, shown

DEFAULT_TIMEOUT_MS = 30_000
TIMEOUT_RANGE_MS = (1_000, 86_400_000)
NAME_MAX = 64
TEXT_MAX = 1_024
COMMON_SETTINGS = ("name", "type")

# A deliberately strict address: ASCII only, no display name, no quoted local part, no comments, no
# IP literal, a domain with at least one dot. Anything smtplib would need SMTPUTF8 for is refused.
_EMAIL = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
                    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]"
                    r"(?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_PHONE = re.compile(r"\+?[0-9]{6,15}")
_HOST = re.compile(r"[A-Za-z0-9._:-]{1,253}")
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an RFC 9110 token
_UNPRINTABLE = ("Cc", "Cf", "Zl", "Zp")  # controls, invisible format characters, line separators


def has_unprintable(value: str) -> bool:
    """Control characters (CR, LF, NUL, ...), bidi overrides and other invisible characters."""
    return any(unicodedata.category(char) in _UNPRINTABLE for char in value)


def check_name(value: Any, field: str) -> str:
    """A provider name: 1..64 printable characters, no surrounding whitespace."""
    if not isinstance(value, str) or not value:
        raise ReachConfigError(field, "is required: a non-empty string")
    if len(value) > NAME_MAX:
        raise ReachConfigError(field, f"must be at most {NAME_MAX} characters")
    if has_unprintable(value) or value != value.strip():
        raise ReachConfigError(field, "must be printable text without surrounding whitespace")
    return value


def check_http_url(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise ReachConfigError(field, "is required: an http:// or https:// URL")
    if any(char.isspace() for char in value) or has_unprintable(value):
        raise ReachConfigError(field, "must not contain whitespace or control characters")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        raise ReachConfigError(field, "is not a valid URL") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ReachConfigError(field, "must be an http:// or https:// URL with a host")
    return value


class Settings:
    """One provider's config mapping, read setting by setting."""

    def __init__(self, name: str, config: Mapping[str, Any], allowed: Collection[str]) -> None:
        self.name = name
        self._config = config
        for key in config:
            if key not in COMMON_SETTINGS and key not in allowed:
                self.fail(str(key), f"is not a setting of {config.get('type')!r} providers "
                                    f"(known: {', '.join(sorted(allowed))})")

    def field(self, key: str) -> str:
        return f"providers.{self.name}.{key}"

    def fail(self, key: str, message: str) -> NoReturn:
        raise ReachConfigError(self.field(key), message)

    def text(self, key: str, *, required: bool = False, default: str | None = None,
             max_length: int = TEXT_MAX) -> str | None:
        value = self._config.get(key)
        if value is None:
            if required:
                self.fail(key, "is required")
            return default
        if not isinstance(value, str) or not value:
            self.fail(key, f"must be a non-empty string (got {type(value).__name__})")
        if len(value) > max_length:
            self.fail(key, f"must be at most {max_length} characters")
        if has_unprintable(value):
            self.fail(key, "must not contain control characters")
        return check_encodable(value, self.field(key), ReachConfigError)

    def required_text(self, key: str, max_length: int = TEXT_MAX) -> str:
        value = self.text(key, required=True, max_length=max_length)
        assert value is not None
        return value

    def integer(self, key: str, default: int, low: int, high: int) -> int:
        return check_int(self._config.get(key, default), self.field(key), low, high, ReachConfigError)

    def timeout_ms(self) -> int:
        return self.integer("timeout_ms", DEFAULT_TIMEOUT_MS, *TIMEOUT_RANGE_MS)

    def boolean(self, key: str, default: bool) -> bool:
        return check_bool(self._config.get(key, default), self.field(key), ReachConfigError)

    def choice(self, key: str, options: tuple[str, ...], default: str) -> str:
        value = self._config.get(key, default)
        if not isinstance(value, str) or value not in options:
            self.fail(key, f"must be one of {', '.join(options)} (got {shown(value)})")
        return str(value)

    def host(self, key: str) -> str:
        value = self._config.get(key)
        if not isinstance(value, str) or not _HOST.fullmatch(value):
            self.fail(key, "is required: a host name or IP address")
        return value

    def email(self, key: str) -> str:
        value = self._config.get(key)
        if not isinstance(value, str) or not is_email(value):
            self.fail(key, "is required: a plain email address (no display name)")
        return value

    def http_url(self, key: str, default: str | None = None) -> str:
        return check_http_url(self._config.get(key, default), self.field(key))

    def headers(self, key: str, reserved: Collection[str]) -> dict[str, str]:
        value = self._config.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(key, "must be a mapping of header names to strings")
        seen: set[str] = set()
        for name, header in value.items():
            self._check_header(f"{key}.{name}", name, header, seen, reserved)
        return dict(value)

    def _check_header(self, key: str, name: Any, value: Any, seen: set[str], reserved: Collection[str]) -> None:
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            self.fail(key, "is not a valid header name")
        if name.lower() in seen:
            self.fail(key, "is given twice (header names are case-insensitive)")
        seen.add(name.lower())
        if name.lower() in reserved:
            self.fail(key, "is set by the provider itself")
        # Never quote the value: it may be a credential.
        if not isinstance(value, str) or any(char in value for char in "\r\n\0"):
            self.fail(key, "must be a string without CR, LF or NUL")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            self.fail(key, "must be latin-1 text")


def mask_endpoint(url: str) -> str:
    """``url`` with its userinfo password, secret-named query values and token-like path segments masked."""
    return mask_url(url)


# --- recipients -------------------------------------------------------------------------


def is_email(value: str) -> bool:
    local = value.rpartition("@")[0]
    return len(value) <= 254 and len(local) <= 64 and _EMAIL.fullmatch(value) is not None


def is_phone(value: str) -> bool:
    return _PHONE.fullmatch(value) is not None


def refuse_recipient(provider: str, rule: str) -> NoReturn:
    """Raise INVALID_RECIPIENT; the recipient itself is personal data and stays out of the message."""
    raise InvalidRecipientError(f"provider {provider!r}: the recipient must be {rule}", provider=provider)


def mask_recipient(to: str) -> str:
    """A recipient fit for a log line: ``a***@example.com``, ``+86*******21``, ``u***``."""
    if is_phone(to):
        keep = 3 if to.startswith("+") else 2
        return to[:keep] + "*" * (len(to) - keep - 2) + to[-2:]
    local, at, domain = to.rpartition("@")
    if at and local:
        return f"{local[:1]}***@{domain}"
    return f"{to[:1]}***"
