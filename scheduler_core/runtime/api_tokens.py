"""Personal API tokens as a runtime service: ``ApiTokens(engine)``, next to ``Accounts``.

A token is ``hai_`` followed by 43 URL-safe characters (256 random bits). It is returned once,
by ``create``; the database keeps its SHA-256 only (a random 256-bit secret needs no slow hash:
nothing can be guessed from the digest). A token signs in as its user with the user's role as
stored at the moment of the request: disabling the user or changing the role takes effect on
the next request. ``use`` checks a token and counts the request against the per-token rate
limit in the same transaction (the window lives in the database: every worker shares it).

A user's tokens have distinct names, revoked ones included (a name says which token it is in
the list, the audit trail and a revoke confirmation); each also keeps its first characters
(``prefix``), which a person holding a copy can match. ``create(..., sealed=True)`` (the Users
page) also stores the token XOR a one-time pad and returns the pad; ``reveal_once`` with that pad
gives the token back once, within SEALED_MAX_AGE_MS, so the page that shows it can be a GET
after a redirect (a reload shows nothing new and creates nothing).

Every bad argument raises :class:`ConfigError` naming it: ``user``, ``name``, ``expires_days``,
``token_id``.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core.access import Access
from scheduler_core.errors import ConfigError
from scheduler_core.runtime.accounts import check_username
from scheduler_core.store.api_tokens import ApiToken, ApiTokenRepository, TokenUse
from scheduler_core.store.users import UserRepository
from scheduler_core.validation import check_int, check_text, shown

__all__ = ["MAX_EXPIRES_DAYS", "MAX_TOKENS", "PREFIX_LENGTH", "SEALED_MAX_AGE_MS", "TOKEN_PREFIX", "ApiToken",
           "ApiTokens", "CreatedToken", "TokenCheck", "check_token_name"]
TOKEN_PREFIX = "hai_"
_TOKEN_LENGTH = len(TOKEN_PREFIX) + 43  # secrets.token_urlsafe(32)
MAX_NAME = 64
MAX_EXPIRES_DAYS = 3_650
MAX_TOKENS = 100  # active tokens per user: the Users page lists them all
DAY_MS = 86_400_000
RATE_WINDOW_MS = 60_000  # the rate limit counts requests per token per minute of the DB clock
MAX_RATE_LIMIT = 1_000_000
PREFIX_LENGTH = len(TOKEN_PREFIX) + 6  # "hai_Ab3xYz": 36 of the token's 256 random bits, enough to tell tokens apart
SEALED_MAX_AGE_MS = 10 * 60_000  # a sealed token not shown within 10 minutes of its creation is never shown


@dataclass(frozen=True)
class CreatedToken:
    token: ApiToken
    secret: str  # the token itself: shown once, never stored
    pad: str | None = None  # create(sealed=True): the one-time pad (hex) that reveal_once needs; None otherwise


@dataclass(frozen=True)
class TokenCheck:
    """A valid token's request: who it signs in as, and whether the rate limit lets it through."""

    token_id: str
    token_name: str
    username: str
    access: Access  # the user's global role and team roles now
    allowed: bool  # False: over the limit of its window
    retry_after_ms: int  # when not allowed: until the window ends
    remaining: int  # requests left in the window


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def _looks_like_token(token: Any) -> bool:
    return (isinstance(token, str) and len(token) == _TOKEN_LENGTH and token.isascii()
            and token.startswith(TOKEN_PREFIX))


def check_token_name(value: Any, field: str = "name") -> str:
    """A token's label: 1..64 printable characters on one line (no control characters)."""
    text = check_text(value, field, MAX_NAME, single_line=True).strip()
    if not text.isprintable():
        raise ConfigError(field, f"must be printable characters only, no control characters (got {shown(value)})")
    return text


def check_expires_days(value: Any, field: str = "expires_days") -> int | None:
    """None (never expires) or a whole number of days, 1..3650."""
    if value is None:
        return None
    return check_int(value, field, 1, MAX_EXPIRES_DAYS)


def check_rate_limit(value: Any, field: str = "HAI_API_RATE_LIMIT") -> int:
    """Requests per token per minute, 1..1,000,000."""
    return check_int(value, field, 1, MAX_RATE_LIMIT)


class ApiTokens:
    """Create, list, revoke and check personal API tokens (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self._repo = ApiTokenRepository(engine)
        self._users = UserRepository(engine)

    def create(self, username: str, name: str, expires_days: int | None = None, sealed: bool = False) -> CreatedToken:
        """A new token for ``username`` (an existing, enabled user) labelled ``name``, a name none
        of the user's tokens has (revoked ones included), expiring after ``expires_days`` days
        (None: until revoked). At most MAX_TOKENS active per user. ``sealed``: also keep it sealed
        for one ``reveal_once`` with the returned ``pad``."""
        check_username(username, "user")
        label = check_token_name(name)
        days = check_expires_days(expires_days)
        user = self._users.get(username)
        if user is None:
            raise ConfigError("user", f"no user {username!r}")
        if user.disabled:
            raise ConfigError("user", f"{username!r} is disabled: enable the user first")
        if self._repo.count_active(username) >= MAX_TOKENS:
            raise ConfigError("user", f"{username!r} has {MAX_TOKENS} tokens: revoke one first")
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        pad = secrets.token_bytes(len(secret)) if sealed else None
        token = self._repo.create(str(uuid.uuid4()), username, label, _digest(secret),
                                  None if days is None else days * DAY_MS, secret[:PREFIX_LENGTH],
                                  None if pad is None else _xor(secret.encode("ascii"), pad).hex(),
                                  SEALED_MAX_AGE_MS if sealed else None)
        if token is None:
            raise ConfigError("name", f"{username!r} already has a token named {label!r} (a revoked token keeps its "
                                      "name): choose another name")
        return CreatedToken(token, secret, None if pad is None else pad.hex())

    def reveal_once(self, username: str, token_id: str, pad: str) -> str | None:
        """The token that ``create(..., sealed=True)`` returned ``pad`` with, the first time only
        and within SEALED_MAX_AGE_MS of its creation; None after that, for a revoked token, or for
        a pad that does not open it (its sealed copy is gone then too)."""
        check_username(username, "user")
        if not _is_uuid(_token_id(token_id)):
            return None
        taken = self._repo.take_sealed(token_id, username, SEALED_MAX_AGE_MS)
        if taken is None:
            return None
        sealed, digest = taken
        try:
            key, locked = bytes.fromhex(pad), bytes.fromhex(sealed)
            secret = _xor(locked, key).decode("ascii") if len(key) == len(locked) else ""
        except (ValueError, UnicodeDecodeError):
            return None
        return secret if _looks_like_token(secret) and _digest(secret) == digest else None

    def list_for(self, username: str) -> list[ApiToken]:
        """``username``'s tokens, oldest first (revoked and expired ones too)."""
        return self._repo.list_for(check_username(username, "user"), 2 * MAX_TOKENS)

    def get(self, token_id: str) -> ApiToken | None:
        return self._repo.get(token_id) if _is_uuid(_token_id(token_id)) else None

    def revoke(self, username: str, token_id: str) -> bool:
        """Revoke ``username``'s token ``token_id``; False when it has no such active token."""
        check_username(username, "user")
        return _is_uuid(_token_id(token_id)) and self._repo.revoke(token_id, username)

    def use(self, token: Any, limit: int) -> TokenCheck | None:
        """Who ``token`` signs in as (None: malformed, unknown, revoked, expired, or its user is
        gone or disabled), counting this request against ``limit`` requests per minute."""
        check_rate_limit(limit, "limit")
        if not _looks_like_token(token):
            return None  # not even looked up: the digest of junk names no row
        found: TokenUse | None = self._repo.use(_digest(token), RATE_WINDOW_MS)
        if found is None:
            return None
        allowed = found.window_count <= limit
        access = Access.of(found.role, found.grants)
        return TokenCheck(found.token_id, found.token_name, found.username, access, allowed,
                          0 if allowed else max(1, found.window_start + RATE_WINDOW_MS - found.now),
                          max(0, limit - found.window_count))


def _xor(data: bytes, pad: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, pad, strict=True))


def _token_id(value: Any) -> str:
    return check_text(value, "token_id", 36, single_line=True)


def _is_uuid(value: Any) -> bool:
    try:
        return isinstance(value, str) and str(uuid.UUID(value)) == value
    except ValueError:
        return False
