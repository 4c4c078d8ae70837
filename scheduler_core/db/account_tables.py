"""The tables of who may sign in to the dashboard and what they may do: users, teams and each
user's role in them, sessions, failed sign-ins, API tokens. On the one ``metadata`` of
``tables.py`` (``scheduler_core/db/__init__.py`` imports this module, so every table is there
wherever the schema is read)."""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Index, Integer, String, Table

from scheduler_core.db.tables import MYSQL_TABLE_OPTIONS, Json, metadata
from scheduler_core.db.tables import ms_column as _ms

users = Table(
    "users",
    metadata,
    Column("username", String(64), primary_key=True),
    Column("password_hash", String(255), nullable=False),  # werkzeug scrypt/pbkdf2 hash, never the password
    Column("role", String(16), nullable=True),  # the global role (every team): viewer | operator | admin; NULL: none
    Column("disabled", Boolean, nullable=False),
    _ms("created_at"),
    _ms("updated_at"),
    _ms("last_login_at", nullable=True),
    # Single sign-on (migration 0023): SHA-256 of the issuer and the subject; NULL: a local account.
    Column("identity", String(64), nullable=True),
    Index(None, "identity", unique=True),
    **MYSQL_TABLE_OPTIONS,
)

# Team namespaces (migration 0025, docs/teams.md): teams, and each user's role in a team.
teams = Table(
    "teams",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(255), nullable=False),
    _ms("created_at"),
    _ms("updated_at"),
    **MYSQL_TABLE_OPTIONS,
)

team_grants = Table(
    "team_grants",
    metadata,
    Column("username", String(64), primary_key=True),
    Column("team", String(64), primary_key=True),
    Column("role", String(16), nullable=False),  # viewer | operator | admin in that team
    _ms("created_at"),
    Index(None, "team"),
    **MYSQL_TABLE_OPTIONS,
)

# Dashboard sessions (migration 0008): the signed cookie holds a random token, this table its
# SHA-256, so a session ends for good when its row goes (logout, password reset, disable, role change).
user_sessions = Table(
    "user_sessions",
    metadata,
    Column("id", String(64), primary_key=True),  # hex SHA-256 of the cookie's token, never the token
    Column("username", String(64), nullable=False),
    _ms("created_at"),
    _ms("last_seen_at"),  # advanced at most once a minute per session
    _ms("expires_at"),  # min(created_at + lifetime, last_seen_at + idle timeout)
    Column("sign_on", Json, nullable=True),  # single sign-on: subject, access token, groups read at (0024)
    Index(None, "username"),  # end every session of a user
    Index(None, "expires_at"),  # prune the expired ones
    **MYSQL_TABLE_OPTIONS,
)

# Failed sign-ins of the last window (migration 0008), counted per client address and per account
# by every worker alike; older rows are pruned as new ones come.
login_failures = Table(
    "login_failures",
    metadata,
    Column("id", String(36), primary_key=True),
    _ms("at"),
    Column("address", String(64), nullable=False),  # the client address (IPv6: its /64)
    Column("username", String(64), nullable=True),  # the name typed, when it could name a user
    Index(None, "address", "at"),
    Index(None, "username", "at"),
    Index(None, "at"),
    **MYSQL_TABLE_OPTIONS,
)

# Personal API tokens (migration 0010): the token is shown once, this table keeps its SHA-256.
# It signs in as ``username`` with that user's current role (a disabled user's tokens stop at once).
api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", String(36), primary_key=True),  # a UUID: what the Users page and the audit trail name
    Column("username", String(64), nullable=False),
    Column("name", String(64), nullable=False),  # the label its creator gave it ("ci", "grafana")
    Column("digest", String(64), nullable=False),  # hex SHA-256 of the token, never the token
    _ms("created_at"),
    _ms("expires_at", nullable=True),  # None: until revoked
    _ms("last_used_at", nullable=True),
    _ms("revoked_at", nullable=True),
    _ms("window_start"),  # the rate-limit window this token's requests are counted in (DB clock)
    Column("window_count", Integer, nullable=False),  # requests counted in that window
    # Migration 0014: the token's first characters ("hai_Ab3xYz"), so that a person holding a copy can
    # tell which row it is (None for tokens made before); and the token sealed with a one-time pad that
    # only the creating browser's session holds, until the page that shows it once is opened (then None).
    Column("prefix", String(16), nullable=True),
    Column("sealed_secret", String(128), nullable=True),
    Index(None, "digest", unique=True),  # every request looks its token up by digest
    Index(None, "username", "created_at"),  # a user's tokens, oldest first
    Index(None, "username", "name", unique=True),  # one name per token of a user, revoked ones included (0014)
    **MYSQL_TABLE_OPTIONS,
)
