"""Dashboard users and the audit trail, as the runtime's operator services.

The webapp reaches the ``users`` and ``audit_log`` tables only through these (webapp ->
runtime -> store): ``scheduler.users`` and ``scheduler.audit``, or ``Accounts(engine)`` /
``AuditTrail(engine)`` for a command that has no scheduler (``create-user``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core.errors import ConfigError
from scheduler_core.runtime.operations import check_page
from scheduler_core.store.users import ROLES, AuditEntry, AuditRepository, User, UserRepository

__all__ = ["ROLES", "Accounts", "AuditEntry", "AuditTrail", "User"]
MAX_NAME = 64
MAX_REASON = 2000


def _name(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        raise ConfigError(field, f"must be 1..{MAX_NAME} characters (got {value!r})")
    return value.strip()


class Accounts:
    """Dashboard users: look-up, creation, password changes, last login."""

    def __init__(self, engine: Engine) -> None:
        self._repo = UserRepository(engine)

    def count(self) -> int:
        return self._repo.count()

    def get(self, name: str) -> User | None:
        return self._repo.get(name) if isinstance(name, str) and 0 < len(name) <= MAX_NAME else None

    def create(self, name: str, role: str, password_hash: str) -> bool:
        """Add a user; False when the name is taken."""
        return self._repo.create(_name("name", name), role, password_hash)

    def set_password(self, name: str, password_hash: str) -> bool:
        return self._repo.set_password(_name("name", name), password_hash)

    def record_login(self, name: str) -> None:
        self._repo.record_login(name)


class AuditTrail:
    """Every operator action: who, when (DB clock), what, before / after, reason."""

    def __init__(self, engine: Engine) -> None:
        self._repo = AuditRepository(engine)

    def record(self, actor: str, action: str, target: str | None, *, before: Any = None, after: Any = None,
               reason: str | None = None) -> str:
        if reason is not None and len(reason) > MAX_REASON:
            raise ConfigError("reason", f"must be at most {MAX_REASON} characters")
        return self._repo.record(_name("actor", actor), _name("action", action), target, before, after, reason)

    def list(self, actor: str | None = None, action: str | None = None, limit: int = 50,
             offset: int = 0) -> list[AuditEntry]:
        check_page(limit, offset)
        return self._repo.list(actor or None, action or None, limit, offset)
