"""Personal API tokens: the rows behind ``Authorization: Bearer`` (migration 0010).

The caller hashes: a row holds the token's SHA-256 (``digest``), never the token. A token is
valid while its row exists, it is not revoked, ``expires_at`` (when set) is in the future (DB
clock) and its user exists and is enabled; it carries the user's role as stored *now*.

Names are unique per user, revoked tokens included (migration 0014): ``create`` answers None
for a name taken. A token created for the Users page keeps, until its one display,
``sealed_secret``: the token XOR a one-time pad that only the creating browser's session holds
(``take_sealed`` reads and clears it in one transaction: one display, ever).

Every check of a valid token also counts the request in the token's fixed rate-limit window
(``window_start`` / ``window_count``) in the same transaction, so every gunicorn worker counts
against the same number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import case, false, func, select, update
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.exc import IntegrityError

from scheduler_core.db.account_tables import api_tokens, users
from scheduler_core.db.clock import db_now_ms, optional_ms, to_ms
from scheduler_core.store.teams import grants_of
from scheduler_core.store.transactions import one_row, read, write


@dataclass(frozen=True)
class ApiToken:
    """A token as the Users page lists it (never its secret, never its digest)."""

    id: str  # UUID
    username: str
    name: str  # the label its creator gave it, unique among the user's tokens
    created_at: int  # DB-clock ms
    expires_at: int | None  # None: until revoked
    last_used_at: int | None
    revoked_at: int | None
    prefix: str | None = None  # the token's first characters ("hai_Ab3xYz"); None for tokens made before 0014

    def active(self, now_ms: int) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now_ms)


@dataclass(frozen=True)
class TokenUse:
    """A valid token's request, counted: who it signs in as and where its window stands."""

    token_id: str
    token_name: str
    username: str
    role: str | None  # the user's global role as stored now (None: none)
    now: int  # DB clock of the check
    window_start: int  # the window this request was counted in
    window_count: int  # requests counted in it, this one included
    grants: dict[str, str] = field(default_factory=dict)  # the user's team roles as stored now


def _token(row: Row[Any]) -> ApiToken:
    return ApiToken(row.id, row.username, row.name, to_ms(row.created_at, "created_at"),
                    optional_ms(row.expires_at, "expires_at"), optional_ms(row.last_used_at, "last_used_at"),
                    optional_ms(row.revoked_at, "revoked_at"), row.prefix)


def _now(conn: Connection) -> int:
    return to_ms(conn.execute(select(db_now_ms())).scalar_one(), "now")


class ApiTokenRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, token_id: str, username: str, name: str, digest: str, lifetime_ms: int | None,
               prefix: str | None = None, sealed_secret: str | None = None,
               sealed_max_age_ms: int | None = None) -> ApiToken | None:
        """Insert a token of ``username`` expiring ``lifetime_ms`` after now (None: never) and
        return it as stored; None (nothing written) when ``username`` has a token named ``name``
        already, revoked or not (the unique index decides, also between two creations at once).
        With ``sealed_max_age_ms``, the user's sealed tokens older than that, never opened, are
        cleared (``sealed_secret`` = NULL). The caller has checked that the user exists."""

        def work(conn: Connection) -> ApiToken | None:
            now = _now(conn)
            try:
                with conn.begin_nested():
                    conn.execute(api_tokens.insert().values(
                        id=token_id, username=username, name=name, digest=digest, created_at=now,
                        expires_at=None if lifetime_ms is None else now + lifetime_ms, window_start=0,
                        window_count=0, prefix=prefix, sealed_secret=sealed_secret))
            except IntegrityError:
                return None
            if sealed_max_age_ms is not None:
                conn.execute(update(api_tokens).where(
                    api_tokens.c.username == username, api_tokens.c.sealed_secret.is_not(None),
                    api_tokens.c.created_at < now - sealed_max_age_ms).values(sealed_secret=None))
            return _token(conn.execute(select(api_tokens).where(api_tokens.c.id == token_id)).one())

        return write(self.engine, work)

    def take_sealed(self, token_id: str, username: str, max_age_ms: int) -> tuple[str, str] | None:
        """The sealed token and its digest, once: ``sealed_secret`` of ``username``'s token
        ``token_id`` is set to NULL in the same transaction. None when it is NULL already (shown,
        or never sealed), or the token is revoked or was created more than ``max_age_ms`` ago (DB
        clock; the sealed value is cleared then too). A conditional UPDATE decides: of two
        requests at once, one reads 1 row and gets it."""

        def work(conn: Connection) -> tuple[str, str] | None:
            mine = (api_tokens.c.id == token_id, api_tokens.c.username == username,
                    api_tokens.c.sealed_secret.is_not(None))
            row = conn.execute(select(api_tokens.c.sealed_secret, api_tokens.c.digest, api_tokens.c.created_at,
                                      api_tokens.c.revoked_at, db_now_ms().label("now")).where(*mine)).first()
            if row is None or not one_row(conn.execute(update(api_tokens).where(*mine).values(sealed_secret=None))):
                return None
            fresh = to_ms(row.created_at, "created_at") > to_ms(row.now, "now") - max_age_ms
            return (str(row.sealed_secret), str(row.digest)) if fresh and row.revoked_at is None else None

        return write(self.engine, work)

    def list_for(self, username: str, limit: int) -> list[ApiToken]:
        """``username``'s tokens, oldest first, at most ``limit`` (revoked and expired ones too)."""
        query = (select(api_tokens).where(api_tokens.c.username == username)
                 .order_by(api_tokens.c.created_at, api_tokens.c.id).limit(limit))
        return [_token(row) for row in read(self.engine, lambda c: c.execute(query).all())]

    def get(self, token_id: str) -> ApiToken | None:
        row = read(self.engine, lambda c: c.execute(select(api_tokens).where(api_tokens.c.id == token_id)).first())
        return _token(row) if row is not None else None

    def revoke(self, token_id: str, username: str) -> bool:
        """Set ``revoked_at`` = now (and ``sealed_secret`` = NULL) on ``username``'s token
        ``token_id`` if it is not revoked yet. False (0 rows): no such token of that user, or
        revoked already."""
        query = update(api_tokens).where(api_tokens.c.id == token_id, api_tokens.c.username == username,
                                         api_tokens.c.revoked_at.is_(None)).values(revoked_at=db_now_ms(),
                                                                                   sealed_secret=None)
        return write(self.engine, lambda c: one_row(c.execute(query)))

    def use(self, digest: str, window_ms: int) -> TokenUse | None:
        """Check the token with ``digest`` and count this request, in one transaction.

        None (nothing written): no such token, revoked, expired, or its user gone or disabled.
        Else ``last_used_at`` = now, and the window: the request is counted in the fixed window
        of ``window_ms`` that holds now (a new window starts again at 1)."""

        def work(conn: Connection) -> TokenUse | None:
            row = conn.execute(
                select(api_tokens.c.id, api_tokens.c.name, api_tokens.c.expires_at, users.c.username, users.c.role,
                       db_now_ms().label("now"))
                .join(users, users.c.username == api_tokens.c.username)
                .where(api_tokens.c.digest == digest, api_tokens.c.revoked_at.is_(None),
                       users.c.disabled == false())).first()
            if row is None:
                return None
            now = to_ms(row.now, "now")
            expires = optional_ms(row.expires_at, "expires_at")
            if expires is not None and expires <= now:
                return None
            window = now - now % window_ms
            # A request whose clock reading is older than the stored window (it raced one that
            # read the next window) counts in the stored window: windows never go back.
            current = api_tokens.c.window_start >= window
            # Ordered: MySQL assigns SET clauses left to right, each seeing the ones before, so
            # the count must be decided while window_start still holds the old window.
            conn.execute(update(api_tokens).where(api_tokens.c.id == row.id).ordered_values(
                (api_tokens.c.window_count, case((current, api_tokens.c.window_count + 1), else_=1)),
                (api_tokens.c.window_start, case((current, api_tokens.c.window_start), else_=window)),
                (api_tokens.c.last_used_at, now)))
            counted = conn.execute(select(api_tokens.c.window_start, api_tokens.c.window_count)
                                   .where(api_tokens.c.id == row.id)).one()
            return TokenUse(row.id, row.name, row.username, row.role, now, to_ms(counted.window_start, "window_start"),
                            int(counted.window_count), grants_of(conn, row.username))

        return write(self.engine, work)

    def count_active(self, username: str) -> int:
        """``username``'s tokens not revoked (expired ones included: they are pruned by nobody)."""
        query = select(func.count()).select_from(api_tokens).where(api_tokens.c.username == username,
                                                                   api_tokens.c.revoked_at.is_(None))
        return int(read(self.engine, lambda c: c.execute(query).scalar_one()))
