"""Dashboard sessions and failed sign-ins: the rows behind a login (migration 0008).

Sessions: the cookie holds a random token, ``user_sessions`` its digest (the caller hashes).
A session is valid while its row exists, ``expires_at`` is in the future (DB clock) and its user
is enabled. Failed sign-ins: ``login_failures`` holds one row per failure of the last window,
by client address and by account name; the caller decides what the counts allow.

Times are read from the database clock first and then compared as values, so every
comparison can use an index (MySQL's SYSDATE in a WHERE clause cannot).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, case, delete, false, func, select, update
from sqlalchemy.engine import Connection, Engine

from scheduler_core.db.account_tables import login_failures, user_sessions, users
from scheduler_core.db.clock import db_now_ms, optional_ms, to_ms
from scheduler_core.store.teams import grants_of
from scheduler_core.store.transactions import read, write


@dataclass(frozen=True)
class SessionUser:
    """Who a valid session belongs to, as stored now."""

    name: str
    role: str | None  # the global role (viewer | operator | admin; None: none), read on every request
    signs_on: bool = False  # a user of the identity provider (False: a local account)
    sign_on: dict[str, Any] | None = None  # the session's single sign-on state (webapp/oidc.py); None: local
    grants: dict[str, str] = field(default_factory=dict)  # team -> role, read on every request


@dataclass(frozen=True)
class FailureCounts:
    """Failed sign-ins within the window, as of ``now`` (DB clock)."""

    now: int
    from_address: int  # by this client address, whatever the name
    oldest_from_address: int | None  # when the oldest of those happened
    on_account: int  # for this account name, from any address
    last_on_account_from_address: int | None  # this address's latest failure for this account


def _now(conn: Connection) -> int:
    return to_ms(conn.execute(select(db_now_ms())).scalar_one(), "now")


def end_user_sessions(conn: Connection, name: str, keep: str | None = None) -> int:
    """Delete every session of ``name`` except ``keep`` (a digest), inside the caller's
    transaction: the change that ends them and their end commit together. Returns the count."""
    query = delete(user_sessions).where(user_sessions.c.username == name)
    if keep is not None:
        query = query.where(user_sessions.c.id != keep)
    return int(conn.execute(query).rowcount)


def _with_grants(conn: Connection, row: Any) -> tuple[Any, dict[str, str]]:
    return row, grants_of(conn, row.username) if row is not None else {}


class SessionRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def start(self, digest: str, name: str, idle_ms: int, lifetime_ms: int,
              sign_on: dict[str, Any] | None = None) -> None:
        """Insert a session expiring after ``min(idle_ms, lifetime_ms)``; first delete every
        expired row (an index range: each row is pruned once, by the next sign-in)."""

        def work(conn: Connection) -> None:
            now = _now(conn)
            conn.execute(delete(user_sessions).where(user_sessions.c.expires_at <= now))
            conn.execute(user_sessions.insert().values(id=digest, username=name, created_at=now, last_seen_at=now,
                                                       expires_at=now + min(idle_ms, lifetime_ms), sign_on=sign_on))

        write(self.engine, work)

    def check(self, digest: str, idle_ms: int, lifetime_ms: int, touch_ms: int) -> SessionUser | None:
        """The user of a valid session, or None (no row, expired, user gone or disabled).
        A session not seen for ``touch_ms`` is seen now: ``last_seen_at`` = now and ``expires_at``
        = min(created_at + lifetime_ms, now + idle_ms). At most one write per session per ``touch_ms``."""
        query = (select(users.c.username, users.c.role, users.c.identity, user_sessions.c.created_at,
                        user_sessions.c.last_seen_at, user_sessions.c.sign_on,
                        user_sessions.c.expires_at, db_now_ms().label("now"))
                 .join(users, users.c.username == user_sessions.c.username)
                 .where(user_sessions.c.id == digest, users.c.disabled == false()))
        row, grants = read(self.engine, lambda c: _with_grants(c, c.execute(query).first()))
        if row is None:
            return None
        now = to_ms(row.now, "now")
        if to_ms(row.expires_at, "expires_at") <= now:
            return None
        if now - to_ms(row.last_seen_at, "last_seen_at") >= touch_ms:
            expires = min(to_ms(row.created_at, "created_at") + lifetime_ms, now + idle_ms)
            write(self.engine, lambda c: c.execute(update(user_sessions).where(user_sessions.c.id == digest).values(
                last_seen_at=now, expires_at=expires)))
        return SessionUser(row.username, row.role, row.identity is not None, row.sign_on, grants)

    def set_sign_on(self, digest: str, sign_on: dict[str, Any]) -> None:
        """The session's single sign-on state, as last read from the provider."""
        write(self.engine, lambda c: c.execute(update(user_sessions).where(user_sessions.c.id == digest).values(
            sign_on=sign_on)))

    def end(self, digest: str) -> None:
        """Delete one session (logout); nothing when it is already gone."""
        write(self.engine, lambda c: c.execute(delete(user_sessions).where(user_sessions.c.id == digest)))

    def count(self, name: str) -> int:
        """Sessions of ``name`` still stored (expired ones until they are pruned)."""
        query = select(func.count()).select_from(user_sessions).where(user_sessions.c.username == name)
        return int(read(self.engine, lambda c: c.execute(query).scalar_one()))


class LoginFailureRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def counts(self, address: str, name: str | None, window_ms: int) -> FailureCounts:
        """Failures of the last ``window_ms``: from ``address`` (any name), and for ``name`` (any
        address; none counted when ``name`` is None)."""

        def work(conn: Connection) -> FailureCounts:
            now = _now(conn)
            since = now - window_ms
            by_address = conn.execute(select(func.count(), func.min(login_failures.c.at)).where(
                login_failures.c.address == address, login_failures.c.at > since)).one()
            on_account: Any = (0, None)
            if name is not None:
                mine = case((login_failures.c.address == address, login_failures.c.at))
                on_account = conn.execute(select(func.count(), func.max(mine)).where(
                    login_failures.c.username == name, login_failures.c.at > since)).one()
            return FailureCounts(now, int(by_address[0]), optional_ms(by_address[1], "at"), int(on_account[0]),
                                 optional_ms(on_account[1], "at"))

        return read(self.engine, work)

    def record(self, address: str, name: str | None, window_ms: int) -> str:
        """Insert one failure now and delete those older than ``window_ms`` (nothing counts them
        any more); returns the new row's id."""
        failure_id = str(uuid.uuid4())

        def work(conn: Connection) -> None:
            now = _now(conn)
            conn.execute(delete(login_failures).where(login_failures.c.at <= now - window_ms))
            conn.execute(login_failures.insert().values(id=failure_id, at=now, address=address, username=name))

        write(self.engine, work)
        return failure_id

    def clear(self, address: str, name: str) -> None:
        """Forget the failures of ``name`` from ``address`` (it signed in from there)."""
        write(self.engine, lambda c: c.execute(delete(login_failures).where(
            and_(login_failures.c.username == name, login_failures.c.address == address))))
