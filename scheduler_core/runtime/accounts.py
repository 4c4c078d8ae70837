"""Dashboard users and the audit trail, as the runtime's operator services.

The webapp reaches the ``users`` and ``audit_log`` tables only through these (webapp ->
runtime -> store): it builds ``Accounts(engine)`` and ``AuditTrail(engine)`` from its engine.

Passwords never come here: the caller hashes them (werkzeug) and hands over the hash;
``check_new_password`` only holds the rules a new password must meet, so every caller
applies the same ones. Every bad input raises :class:`ConfigError` naming its field.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core.errors import ConfigError
from scheduler_core.store.users import ROLES, AuditEntry, AuditRepository, LastAdminError, User, UserRepository
from scheduler_core.validation import (
    check_bool,
    check_json,
    check_ms,
    check_optional_text,
    check_page,
    check_text,
    shown,
)

__all__ = ["MIN_PASSWORD", "ROLES", "Accounts", "AuditEntry", "AuditTrail", "LastAdminError", "User",
           "check_new_password", "check_role", "check_username"]
MAX_NAME = 64
MAX_REASON = 2000
TARGET_MAX = 255  # what an action was about: a task id, an occurrence id, a template name
MIN_PASSWORD = 8
MAX_PASSWORD = 1024  # hashing is deliberately slow: bound the work one form can ask for
MAX_HASH = 255  # the column's width
USERNAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")  # ASCII only: no look-alike letters, safe in a URL path


def _name(field: str, value: Any) -> str:
    return check_text(value, field, MAX_NAME, single_line=True)


def check_username(value: Any, field: str = "name") -> str:
    """A user name: 1..64 characters, ASCII letters, digits and ``.-_@``; not only dots (``.``
    and ``..`` could not be reached in a URL path)."""
    if not isinstance(value, str) or USERNAME.fullmatch(value) is None:
        raise ConfigError(field, f"must be 1..{MAX_NAME} characters, letters, digits and . - _ @ only "
                                 f"(got {shown(value)})")
    if not value.strip("."):
        raise ConfigError(field, f"must hold a letter, digit, -, _ or @, not only dots (got {shown(value)})")
    return value


def check_role(value: Any, field: str = "role") -> str:
    if not isinstance(value, str) or value not in ROLES:
        raise ConfigError(field, f"must be one of {', '.join(ROLES)} (got {shown(value)})")
    return str(value)


def check_new_password(password: Any, confirm: Any) -> str:
    """A new password typed twice: ``password`` at least MIN_PASSWORD characters, ``confirm`` the
    same. The messages never repeat what was typed."""
    if not isinstance(password, str) or len(password) < MIN_PASSWORD:
        raise ConfigError("password", f"must have at least {MIN_PASSWORD} characters")
    if len(password) > MAX_PASSWORD:
        raise ConfigError("password", f"must have at most {MAX_PASSWORD} characters")
    if confirm != password:
        raise ConfigError("confirm", "must repeat the password exactly")
    return password


def _version(value: Any) -> int:
    return check_ms(value, "expected_updated_at")


def _hash(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_HASH:
        raise ConfigError("password_hash", f"must be a password hash of 1..{MAX_HASH} characters")
    return value


class Accounts:
    """Dashboard users: look-up, listing, creation, role, disabling, passwords, last login.

    Changes name the version they were decided on (``expected_updated_at``): ConflictError when
    the user changed since, LastAdminError (a ConfigError) when the last enabled admin would be
    demoted or disabled; either way nothing is written.
    """

    def __init__(self, engine: Engine) -> None:
        self._repo = UserRepository(engine)

    def count(self) -> int:
        return self._repo.count()

    def count_enabled_admins(self) -> int:
        return self._repo.count_enabled_admins()

    def get(self, name: str) -> User | None:
        """The user, or None -- also for a text no user can be named (a login form's typo)."""
        check_text(name, "name", MAX_PASSWORD, blank=True)  # a string any database can compare
        return self._repo.get(name) if USERNAME.fullmatch(name) else None

    def page(self, after: str | None = None, limit: int = 100) -> list[User]:
        """Users by name, at most ``limit`` after the name ``after``."""
        check_page(limit, 0)
        if after is not None:
            check_text(after, "after", MAX_NAME, blank=True)
        return self._repo.page(after or None, limit)

    def create(self, name: str, role: str, password_hash: str) -> bool:
        """Add a user; False when the name is taken."""
        return self._repo.create(check_username(name), check_role(role), _hash(password_hash))

    def set_password(self, name: str, password_hash: str) -> bool:
        """Replace the password hash whatever the version (``create-user --reset``); False when no such user."""
        return self._repo.set_password(_name("name", name), _hash(password_hash))

    def reset_password(self, name: str, password_hash: str, expected_updated_at: int) -> User:
        return self._repo.reset_password(_name("name", name), _hash(password_hash), _version(expected_updated_at))

    def set_role(self, name: str, role: str, expected_updated_at: int) -> User:
        return self._repo.set_role(_name("name", name), check_role(role), _version(expected_updated_at))

    def set_disabled(self, name: str, disabled: bool, expected_updated_at: int, actor: str | None = None) -> User:
        """Disable (or enable) ``name``; ``actor``, the admin asking, may not disable themselves."""
        check_bool(disabled, "disabled")
        if disabled and actor is not None and actor == name:
            raise ConfigError("disabled", "you cannot disable your own account")
        return self._repo.set_disabled(_name("name", name), disabled, _version(expected_updated_at))

    def record_login(self, name: str) -> None:
        self._repo.record_login(_name("name", name))


class AuditTrail:
    """Every operator action: who, when (DB clock), what, before / after, reason."""

    def __init__(self, engine: Engine) -> None:
        self._repo = AuditRepository(engine)

    def record(self, actor: str, action: str, target: str | None, *, before: Any = None, after: Any = None,
               reason: str | None = None) -> str:
        check_optional_text(reason, "reason", MAX_REASON)
        check_optional_text(target, "target", TARGET_MAX)
        check_json(before, "before")
        check_json(after, "after")
        return self._repo.record(_name("actor", actor), _name("action", action), target, before, after, reason)

    def list(self, actor: str | None = None, action: str | None = None, limit: int = 50,
             offset: int = 0) -> list[AuditEntry]:
        check_page(limit, offset)
        actor = check_optional_text(actor or None, "actor", MAX_NAME)
        action = check_optional_text(action or None, "action", MAX_NAME)
        return self._repo.list(actor, action, limit, offset)
