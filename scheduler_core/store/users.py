"""Dashboard users and the audit trail. A change that could take away the last administrator
locks every enabled admin's row first (in name order), so two admins demoting each other at once
are serialised and the second is refused. A change of password, role or state ends the user's
sessions in the same transaction (``keep``: the one session that asked, when it is theirs)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import false, func, select, update
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.exc import IntegrityError

from scheduler_core.access import EVERY_TEAM, Scope
from scheduler_core.db.account_tables import api_tokens, users
from scheduler_core.db.clock import db_now_ms, db_statement_now_ms, optional_ms, to_ms
from scheduler_core.db.tables import audit_log
from scheduler_core.errors import ConfigError, ConflictError
from scheduler_core.statuses import ROLES
from scheduler_core.store.dialect import greatest
from scheduler_core.store.logins import end_user_sessions
from scheduler_core.store.teams import audit_team, grants_of, replace_grants
from scheduler_core.store.transactions import one_row, read, write


@dataclass(frozen=True)
class User:
    name: str
    role: str | None  # the global role (every team): viewer | operator | admin; None: none (team grants only)
    password_hash: str = field(repr=False)  # never in a log line or an error message
    disabled: bool
    last_login_at: int | None
    created_at: int
    updated_at: int  # the version a change must name (compare-and-set)
    identity: str | None = None  # signs on with the identity provider (its role comes from there); None: local


@dataclass(frozen=True)
class SignedOn:
    """A sign-on's user as written, and as it was before (None: created now)."""

    user: User
    before: User | None
    grants_before: dict[str, str]


class LastAdminError(ConfigError):
    """The change would leave no enabled admin: nobody could manage users any more."""


class NameTakenError(ConfigError):
    """Signing on as a name a local account (or another person of the provider) already has."""


_NAME_TAKEN = ("the user name the identity provider gives is another user's here: an admin must rename or "
               "remove that user first")
NO_PASSWORD = "!sign-on"  # the password hash of a user who signs on: no password matches it


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
                optional_ms(row.last_login_at, "last_login_at"), to_ms(row.created_at, "created_at"),
                to_ms(row.updated_at, "updated_at"), row.identity)


def _check_role(role: str | None, optional: bool = False) -> None:
    if role not in ROLES and not (optional and role is None):
        raise ConfigError("role", f"must be one of {', '.join(ROLES)} (got {role!r})")


_ENABLED_ADMIN = (users.c.role == "admin", users.c.disabled == false())


class UserRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def count(self) -> int:
        return int(read(self.engine, lambda c: c.execute(select(func.count()).select_from(users)).scalar_one()))

    def count_enabled_admins(self) -> int:
        query = select(func.count()).select_from(users).where(*_ENABLED_ADMIN)
        return int(read(self.engine, lambda c: c.execute(query).scalar_one()))

    def get(self, name: str) -> User | None:
        row = read(self.engine, lambda c: c.execute(select(users).where(users.c.username == name)).first())
        return _user(row) if row is not None else None

    def page(self, after: str | None, limit: int) -> list[User]:
        """Users by name, ``limit`` at a time after the name ``after`` (keyset on the primary key)."""
        query = select(users).order_by(users.c.username).limit(limit)
        if after is not None:
            query = query.where(users.c.username > after)
        return [_user(row) for row in read(self.engine, lambda c: c.execute(query).all())]

    def create(self, name: str, role: str, password_hash: str) -> bool:
        """Insert a user; False when the name is taken."""
        _check_role(role)

        def work(conn: Connection) -> bool:
            now = db_statement_now_ms()  # one reading: created_at = updated_at
            try:
                with conn.begin_nested():
                    conn.execute(users.insert().values(username=name, role=role, password_hash=password_hash,
                                                       disabled=False, created_at=now, updated_at=now))
            except IntegrityError:
                return False
            return True

        return write(self.engine, work)

    def set_password(self, name: str, password_hash: str) -> bool:
        """A new password hash whatever the version (the ``create-user --reset`` command); every
        session of the user ends with it."""

        def work(conn: Connection) -> bool:
            changed = one_row(conn.execute(update(users).where(users.c.username == name).values(
                password_hash=password_hash, updated_at=greatest(conn, db_now_ms(), users.c.updated_at + 1))))
            end_user_sessions(conn, name)
            return changed

        return write(self.engine, work)

    def reset_password(self, name: str, password_hash: str, expected_updated_at: int, keep: str | None = None) -> User:
        """A new password hash at version ``expected_updated_at`` only (ConflictError otherwise)."""
        return self._change(name, expected_updated_at, {"password_hash": password_hash}, what="password", keep=keep)

    def set_role(self, name: str, role: str | None, expected_updated_at: int, keep: str | None = None) -> User:
        """Change a user's global role (None: none) at version ``expected_updated_at``;
        LastAdminError when it would demote the last enabled admin, ConflictError when the user
        changed or is gone."""
        _check_role(role, optional=True)
        return self._change(name, expected_updated_at, {"role": role}, what="role", keep=keep)

    def grants(self, name: str) -> dict[str, str]:
        """``name``'s role in each team that grants one."""
        return read(self.engine, lambda c: grants_of(c, name))

    def set_grants(self, name: str, grants: Mapping[str, str], expected_updated_at: int,
                   keep: str | None = None) -> User:
        """``name``'s team roles become ``grants`` at version ``expected_updated_at`` (teams that
        exist, roles that are roles: ``ConfigError`` naming ``grants``); their sessions end but
        ``keep``, as for a role change."""
        return self._change(name, expected_updated_at, {}, what="grants", keep=keep,
                            then=lambda conn: replace_grants(conn, name, grants))

    def set_disabled(self, name: str, disabled: bool, expected_updated_at: int) -> User:
        """Disable or enable a user at version ``expected_updated_at``; LastAdminError when it
        would disable the last enabled admin, ConflictError when the user changed or is gone."""
        return self._change(name, expected_updated_at, {"disabled": bool(disabled)}, what="disabled")

    def _change(self, name: str, expected_updated_at: int, values: dict[str, Any], what: str,
                keep: str | None = None, then: Callable[[Connection], object] | None = None) -> User:
        """Check and change in ONE transaction: lock the enabled admins, then the user; refuse a
        stale version or losing the last admin (nothing written); else write, end the user's
        sessions but ``keep`` (a session digest), and read back."""

        def work(conn: Connection) -> User:
            admins = list(conn.execute(select(users.c.username).where(*_ENABLED_ADMIN)
                                       .order_by(users.c.username).with_for_update()).scalars())
            row = conn.execute(select(users).where(users.c.username == name).with_for_update()).first()
            if row is None or to_ms(row.updated_at, "updated_at") != expected_updated_at:
                raise ConflictError(f"user {name!r} changed since version {expected_updated_at} (or is gone)",
                                    name=name)
            current = _user(row)
            if current.identity is not None and what in ("role", "password", "grants"):
                raise ConfigError(what, f"{name!r} signs on with the identity provider and has no password here"
                                  if what == "password" else f"{name!r} signs on with the identity provider: its "
                                  "roles come from there (its groups)")
            stays_admin = values.get("role", current.role) == "admin" and not values.get("disabled", current.disabled)
            if name in admins and not stays_admin and len(admins) <= 1:
                raise LastAdminError(what, f"{name!r} is the last enabled admin: make another user an admin "
                                            "first, or nobody could manage users any more")
            changed = conn.execute(update(users).where(
                users.c.username == name, users.c.updated_at == expected_updated_at,
            ).values(**values, updated_at=greatest(conn, db_now_ms(), users.c.updated_at + 1))).rowcount
            if changed != 1:  # cannot happen under the row lock; never report a change that did not land
                raise ConflictError(f"user {name!r} changed meanwhile", name=name)
            if then is not None:
                then(conn)
            end_user_sessions(conn, name, keep)
            return _user(conn.execute(select(users).where(users.c.username == name)).one())

        return write(self.engine, work)

    def sign_on(self, name: str, identity: str, role: str | None, grants: Mapping[str, str]) -> SignedOn:
        """The user who signs on with ``identity`` (a digest of issuer and subject), created on
        first sign-on as ``name``, with ``role`` (what their groups grant now) written when it
        changed, and ``grants`` (team roles) likewise; with the user as it was before (None: created
        now). Raises ``NameTakenError``
        when ``name`` is another user's: a local account is never taken over by a person of the
        provider who has its name. A disabled user is returned as it is (the caller refuses it)."""
        _check_role(role, optional=True)

        def work(conn: Connection) -> SignedOn:
            row = conn.execute(select(users).where(users.c.identity == identity).with_for_update()).first()
            before = _user(row) if row is not None else None
            if row is None and conn.execute(select(users.c.username).where(
                    func.lower(users.c.username) == name.lower()).limit(1)).first() is not None:
                raise NameTakenError("name", _NAME_TAKEN)  # also as Admin for admin: one person's name, once
            if row is None:
                now = db_statement_now_ms()
                try:
                    with conn.begin_nested():
                        conn.execute(users.insert().values(
                            username=name, role=role, password_hash=NO_PASSWORD, disabled=False, identity=identity,
                            created_at=now, updated_at=now))
                except IntegrityError:  # the name is taken, or a sign-on of the same person at the same instant
                    row = conn.execute(select(users).where(users.c.identity == identity).with_for_update()).first()
                    if row is None:
                        raise NameTakenError("name", _NAME_TAKEN) from None
                    before = _user(row)
                else:
                    row = conn.execute(select(users).where(users.c.identity == identity)).one()
            grants_before = grants_of(conn, row.username)
            if not row.disabled and (replace_grants(conn, row.username, grants) or row.role != role):
                conn.execute(update(users).where(users.c.identity == identity).values(
                    role=role, updated_at=greatest(conn, db_now_ms(), users.c.updated_at + 1)))
                row = conn.execute(select(users).where(users.c.identity == identity)).one()
            return SignedOn(_user(row), before, grants_before)

        return write(self.engine, work)

    def lose_access(self, name: str) -> tuple[int, int]:
        """The identity provider says a user who signs on is granted nothing now: every session of
        theirs ends and every API token of theirs is revoked, in one transaction (a person who
        regains a group signs on again and makes new tokens). Returns (sessions, tokens) ended."""

        def work(conn: Connection) -> tuple[int, int]:
            sessions = end_user_sessions(conn, name)
            tokens = conn.execute(update(api_tokens).where(
                api_tokens.c.username == name, api_tokens.c.revoked_at.is_(None),
            ).values(revoked_at=db_now_ms(), sealed_secret=None)).rowcount
            return sessions, int(tokens)

        return write(self.engine, work)

    def record_login(self, name: str) -> None:
        write(self.engine, lambda c: c.execute(update(users).where(users.c.username == name).values(
            last_login_at=db_now_ms())))


class AuditRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def record(self, actor: str, action: str, target: str | None, before: Any = None, after: Any = None,
               reason: str | None = None, team: str | None = None) -> str:
        """One entry; its team is ``team``, else the one its target belongs to (``audit_team``)."""
        entry_id = str(uuid.uuid4())
        write(self.engine, lambda c: c.execute(audit_log.insert().values(
            id=entry_id, at=db_now_ms(), actor=actor, action=action, target=target, before=before, after=after,
            reason=reason, team=team if team is not None else audit_team(action, target))))
        return entry_id

    def count(self, actor: str, action: str, target: str) -> int:
        """How many entries of ``actor`` doing ``action`` to ``target`` the trail holds."""
        query = select(func.count()).select_from(audit_log).where(
            audit_log.c.actor == actor, audit_log.c.action == action, audit_log.c.target == target)
        return int(read(self.engine, lambda c: c.execute(query).scalar_one()))

    def list(self, actor: str | None = None, action: str | None = None, limit: int = 50,
             offset: int = 0, scope: Scope = EVERY_TEAM) -> list[AuditEntry]:
        """Entries newest first; for a caller of some teams only (``scope``), those about their teams."""
        query = select(audit_log)
        if scope.teams is not None:
            query = query.where(audit_log.c.team.in_(sorted(scope.teams)))
        if actor:
            query = query.where(audit_log.c.actor == actor)
        if action:
            query = query.where(audit_log.c.action == action)
        query = query.order_by(audit_log.c.at.desc(), audit_log.c.id.desc()).limit(limit).offset(offset)
        return [AuditEntry(r.id, to_ms(r.at, "at"), r.actor, r.action, r.target, r.before, r.after, r.reason)
                for r in read(self.engine, lambda c: c.execute(query).all())]
