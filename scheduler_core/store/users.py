"""Dashboard users and the audit trail."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.exc import IntegrityError

from scheduler_core.db.clock import db_now_ms, optional_ms, to_ms
from scheduler_core.db.tables import audit_log, users
from scheduler_core.errors import ConfigError
from scheduler_core.store.dialect import read, write

ROLES = ("viewer", "operator", "admin")


@dataclass(frozen=True)
class User:
    name: str
    role: str  # viewer | operator | admin
    password_hash: str
    disabled: bool
    last_login_at: int | None


@dataclass(frozen=True)
class AuditEntry:
    id: str
    at: int
    actor: str
    action: str
    target: str | None
    before: Any
    after: Any
    reason: str | None


def _user(row: Row[Any]) -> User:
    return User(row.username, row.role, row.password_hash, bool(row.disabled),
                optional_ms(row.last_login_at, "last_login_at"))


class UserRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def count(self) -> int:
        return int(read(self.engine, lambda c: c.execute(select(func.count()).select_from(users)).scalar_one()))

    def get(self, name: str) -> User | None:
        row = read(self.engine, lambda c: c.execute(select(users).where(users.c.username == name)).first())
        return _user(row) if row is not None else None

    def create(self, name: str, role: str, password_hash: str) -> bool:
        """Insert a user; False when the name is taken."""
        if role not in ROLES:
            raise ConfigError("role", f"must be one of {', '.join(ROLES)} (got {role!r})")

        def work(conn: Connection) -> bool:
            now = db_now_ms()
            try:
                with conn.begin_nested():
                    conn.execute(users.insert().values(username=name, role=role, password_hash=password_hash,
                                                       disabled=False, created_at=now, updated_at=now))
            except IntegrityError:
                return False
            return True

        return write(self.engine, work)

    def set_password(self, name: str, password_hash: str) -> bool:
        return write(self.engine, lambda c: c.execute(update(users).where(users.c.username == name).values(
            password_hash=password_hash, updated_at=db_now_ms())).rowcount == 1)

    def record_login(self, name: str) -> None:
        write(self.engine, lambda c: c.execute(update(users).where(users.c.username == name).values(
            last_login_at=db_now_ms())))


class AuditRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def record(self, actor: str, action: str, target: str | None, before: Any = None, after: Any = None,
               reason: str | None = None) -> str:
        entry_id = str(uuid.uuid4())
        write(self.engine, lambda c: c.execute(audit_log.insert().values(
            id=entry_id, at=db_now_ms(), actor=actor, action=action, target=target, before=before, after=after,
            reason=reason)))
        return entry_id

    def list(self, actor: str | None = None, action: str | None = None, limit: int = 50,
             offset: int = 0) -> list[AuditEntry]:
        query = select(audit_log)
        if actor:
            query = query.where(audit_log.c.actor == actor)
        if action:
            query = query.where(audit_log.c.action == action)
        query = query.order_by(audit_log.c.at.desc(), audit_log.c.id.desc()).limit(limit).offset(offset)
        return [AuditEntry(r.id, to_ms(r.at, "at"), r.actor, r.action, r.target, r.before, r.after, r.reason)
                for r in read(self.engine, lambda c: c.execute(query).all())]
