"""Dashboard users and the audit trail, as the runtime's operator services.

The webapp reaches the ``users`` and ``audit_log`` tables only through these (webapp ->
runtime -> store): it builds ``Accounts(engine)`` and ``AuditTrail(engine)`` from its engine.

Passwords never come here: the caller hashes them (werkzeug) and hands over the hash;
``check_new_password`` only holds the rules a new password must meet, so every caller
applies the same ones. Every bad input raises :class:`ConfigError` naming its field.

``Logins`` holds what a sign-in leaves on the server, shared by every worker: sessions (the
cookie carries a random token; the database its SHA-256, so ending a session is deleting a row)
and the login throttle (``login_verdict``: the rule, in the README's security section).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core.access import DEFAULT_TEAM, EVERY_TEAM, Access, Scope
from scheduler_core.errors import ConfigError
from scheduler_core.statuses import ROLES
from scheduler_core.store.logins import FailureCounts, LoginFailureRepository, SessionRepository, SessionUser
from scheduler_core.store.teams import Team, TeamRepository
from scheduler_core.store.users import (
    AuditEntry,
    AuditRepository,
    LastAdminError,
    NameTakenError,
    SignedOn,
    User,
    UserRepository,
)
from scheduler_core.validation import (
    check_bool,
    check_json,
    check_ms,
    check_optional_text,
    check_page,
    check_team,
    check_text,
    shown,
)

TEAM_NAME_MAX = 255  # a team's display name (teams.name)

__all__ = [
    "MIN_PASSWORD",
    "ROLES",
    "Accounts",
    "AuditEntry",
    "AuditTrail",
    "FailureCounts",
    "LastAdminError",
    "LoginVerdict",
    "Logins",
    "NameTakenError",
    "SessionUser",
    "SignedOn",
    "User",
    "check_new_password",
    "check_role",
    "check_username",
    "login_verdict",
]
MAX_NAME = 64
MAX_GRANTS = 1000  # teams one user holds a role in
MAX_REASON = 2000
TARGET_MAX = 255  # what an action was about: a task id, an occurrence id, a template name
MIN_PASSWORD = 8
MAX_PASSWORD = 1024  # hashing is deliberately slow: bound the work one form can ask for
MAX_HASH = 255  # the column's width
USERNAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")  # ASCII only: no look-alike letters, safe in a URL path

SESSION_LIFETIME_MS = 12 * 3_600_000  # a session ends 12 h after sign-in, whatever happens
SESSION_IDLE_MS = 3_600_000  # ... or after an hour without a request (an open page's live refresh counts)
SESSION_TOUCH_MS = 60_000  # a session's last request is written at most once a minute
FAILURE_WINDOW_MS = 15 * 60_000  # failed sign-ins count for 15 minutes
ADDRESS_LIMIT = 20  # failures from one client address in the window: then it is refused
ACCOUNT_FREE = 5  # failures on one account (from anywhere) before addresses that failed on it wait
ACCOUNT_FIRST_WAIT_MS = 5_000  # their wait after ACCOUNT_FREE failures, doubling with each further one
ACCOUNT_MAX_WAIT_MS = 5 * 60_000


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


def check_global_role(value: Any, field: str = "role") -> str | None:
    """A global role, or ``none`` / None for none (the user's team roles only)."""
    return None if value in (None, "none") else check_role(value, field)


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
        self._teams = TeamRepository(engine)

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
        """Replace the password hash whatever the version (``create-user --reset``); False when no
        such user. Every session of the user ends."""
        return self._repo.set_password(_name("name", name), _hash(password_hash))

    def reset_password(self, name: str, password_hash: str, expected_updated_at: int,
                       keep_session: str | None = None) -> User:
        """A new password; every session of the user ends but ``keep_session`` (the token of the
        session asking, when it is the user's own)."""
        return self._repo.reset_password(_name("name", name), _hash(password_hash), _version(expected_updated_at),
                                         _digest_or_none(keep_session))

    def set_role(self, name: str, role: str | None, expected_updated_at: int,
                 keep_session: str | None = None) -> User:
        """A new global role (``none``: none); every session of the user ends but ``keep_session``
        (as for a password)."""
        return self._repo.set_role(_name("name", name), check_global_role(role), _version(expected_updated_at),
                                   _digest_or_none(keep_session))

    def grants(self, name: str) -> dict[str, str]:
        """``name``'s role in each team that grants one."""
        return self._repo.grants(_name("name", name))

    def teams(self) -> list[str]:
        """Every team's id, in order."""
        return [team.id for team in self._teams.all()]

    def rename_team(self, team_id: str, name: str) -> Team:
        """A team's display name (its id stays)."""
        check_team(team_id, "team")
        shown_name = check_text(name.strip() if isinstance(name, str) else name, "name", TEAM_NAME_MAX,
                                single_line=True)
        return self._teams.rename(team_id, shown_name)

    def delete_team(self, team_id: str) -> int:
        """Delete a team without tasks (``default`` stays), and the roles granted in it (how many)."""
        check_team(team_id, "team")
        if team_id == DEFAULT_TEAM:
            raise ConfigError("team", "default is every installation's team and stays")
        return self._teams.delete(team_id)

    def team_list(self) -> list[Team]:
        """Every team (id, display name, times), by id."""
        return self._teams.all()

    def create_team(self, team_id: str, name: str | None = None) -> Team:
        """A new team (docs/teams.md): its id (``check_team``) and a display name (default: the id)."""
        check_team(team_id, "team")
        typed = name if name is not None else team_id
        shown_name = check_text(typed.strip() if isinstance(typed, str) else typed, "name", TEAM_NAME_MAX,
                                single_line=True)
        return self._teams.create(team_id, shown_name)

    def set_grants(self, name: str, grants: Mapping[str, str], expected_updated_at: int,
                   keep_session: str | None = None) -> User:
        """``name``'s team roles become ``grants`` (team -> role); sessions end as for a role change."""
        if not isinstance(grants, Mapping) or len(grants) > MAX_GRANTS:
            raise ConfigError("grants", f"must map at most {MAX_GRANTS} teams to roles")
        checked = {_name("grants", team): check_role(role, "grants") for team, role in grants.items()}
        return self._repo.set_grants(_name("name", name), checked, _version(expected_updated_at),
                                     _digest_or_none(keep_session))

    def set_disabled(self, name: str, disabled: bool, expected_updated_at: int, actor: str | None = None) -> User:
        """Disable (or enable) ``name``, ending every session of theirs; ``actor``, the admin
        asking, may not disable themselves."""
        check_bool(disabled, "disabled")
        if disabled and actor is not None and actor == name:
            raise ConfigError("disabled", "you cannot disable your own account")
        return self._repo.set_disabled(_name("name", name), disabled, _version(expected_updated_at))

    def record_login(self, name: str) -> None:
        self._repo.record_login(_name("name", name))

    def lose_access(self, name: str) -> tuple[int, int]:
        """End every session and revoke every API token of ``name`` (their groups grant nothing
        now); (sessions, tokens) ended."""
        return self._repo.lose_access(_name("name", name))

    def sign_on(self, issuer: str, subject: str, name: Any, access: Access) -> SignedOn:
        """The user a person of the identity provider (``issuer``, ``subject``) is here, and as it
        was before (None: created now, as ``name``); its role what their groups grant now. ``NameTakenError``
        when the name is another user's (a local account is never taken over);
        ``ConfigError`` naming ``name`` when it cannot be a user name."""
        identity = hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()
        return self._repo.sign_on(check_username(name), identity, access.global_role, dict(access.grants))


def _digest(token: str) -> str:
    """What the database keeps of a session token: its SHA-256 (a copy of the table is no cookie)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _digest_or_none(token: Any) -> str | None:
    return _digest(token) if _is_token(token) else None


def _is_token(token: Any) -> bool:
    return isinstance(token, str) and 32 <= len(token) <= 64 and token.isascii()


@dataclass(frozen=True)
class LoginVerdict:
    """Whether a sign-in may be tried now, and if not, for how long it waits."""

    allowed: bool
    retry_after_ms: int = 0
    reason: str | None = None  # "address" (refused) | "account" (slowed down)


def login_verdict(counts: FailureCounts) -> LoginVerdict:
    """The throttle's rule, on the failures of the last FAILURE_WINDOW_MS.

    - Per client address: ADDRESS_LIMIT failures (any names) and the address is refused until the
      oldest leaves the window. Spraying names from one address is stopped by this.
    - Per account: once it has ACCOUNT_FREE failures (from anywhere), an address that has itself
      failed on it waits ACCOUNT_FIRST_WAIT_MS after its latest failure there, doubling with each
      further failure on the account, at most ACCOUNT_MAX_WAIT_MS. An address without a failure on
      the account never waits: the right password from elsewhere always signs in, and a stranger
      can slow down only the addresses that guessed wrong.
    """
    if counts.from_address >= ADDRESS_LIMIT and counts.oldest_from_address is not None:
        return LoginVerdict(False, max(1, counts.oldest_from_address + FAILURE_WINDOW_MS - counts.now), "address")
    last = counts.last_on_account_from_address
    if counts.on_account >= ACCOUNT_FREE and last is not None:
        wait = min(ACCOUNT_MAX_WAIT_MS, ACCOUNT_FIRST_WAIT_MS * 2 ** min(counts.on_account - ACCOUNT_FREE, 16))
        if last + wait > counts.now:
            return LoginVerdict(False, last + wait - counts.now, "account")
    return LoginVerdict(True)


def _account(name: Any) -> str | None:
    """The account a typed name counts against: None when no user could have it."""
    return name if isinstance(name, str) and USERNAME.fullmatch(name) else None


def _address(address: Any) -> str:
    return check_text(address, "address", 64, single_line=True)


class Logins:
    """Sessions and the login throttle (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self._sessions = SessionRepository(engine)
        self._failures = LoginFailureRepository(engine)

    def start_session(self, name: str, sign_on: dict[str, Any] | None = None) -> str:
        """A new session of ``name`` (with its single sign-on state); returns the token for the
        cookie (only its digest is stored)."""
        token = secrets.token_urlsafe(32)
        check_json(sign_on, "sign_on")
        self._sessions.start(_digest(token), _name("name", name), SESSION_IDLE_MS, SESSION_LIFETIME_MS, sign_on)
        return token

    def set_sign_on(self, token: Any, sign_on: dict[str, Any]) -> None:
        if _is_token(token):
            check_json(sign_on, "sign_on")
            self._sessions.set_sign_on(_digest(token), sign_on)

    def session_user(self, token: Any) -> SessionUser | None:
        """Who a session token signs in, or None: unknown, ended, expired, idle too long, or its
        user gone or disabled."""
        if not _is_token(token):
            return None
        return self._sessions.check(_digest(token), SESSION_IDLE_MS, SESSION_LIFETIME_MS, SESSION_TOUCH_MS)

    def end_session(self, token: Any) -> None:
        if _is_token(token):
            self._sessions.end(_digest(token))

    def sessions_of(self, name: str) -> int:
        return self._sessions.count(_name("name", name))

    def verdict(self, address: str, name: Any) -> LoginVerdict:
        """May a sign-in as ``name`` from ``address`` be tried now (``login_verdict``)?"""
        return login_verdict(self._failures.counts(_address(address), _account(name), FAILURE_WINDOW_MS))

    def attempt(self, address: str, name: Any) -> None:
        """Count a sign-in as failed before its password is checked: concurrent guesses are all
        counted. ``succeeded`` takes it back."""
        self._failures.record(_address(address), _account(name), FAILURE_WINDOW_MS)

    def succeeded(self, address: str, name: str) -> None:
        """``name`` signed in from ``address``: its failures there no longer count."""
        self._failures.clear(_address(address), _name("name", name))


class AuditTrail:
    """Every operator action: who, when (DB clock), what, before / after, reason."""

    def __init__(self, engine: Engine) -> None:
        self._repo = AuditRepository(engine)

    def record(self, actor: str, action: str, target: str | None, *, before: Any = None, after: Any = None,
               reason: str | None = None, team: str | None = None) -> str:
        """One entry; ``team``: the team it is about when its target does not say (a deleted task's,
        a bulk action's), else the store reads it from the target (docs/teams.md)."""
        check_optional_text(reason, "reason", MAX_REASON)
        check_optional_text(target, "target", TARGET_MAX)
        check_json(before, "before")
        check_json(after, "after")
        return self._repo.record(_name("actor", actor), _name("action", action), target, before, after, reason,
                                 None if team is None else check_team(team, "team"))

    def list(self, actor: str | None = None, action: str | None = None, limit: int = 50,
             offset: int = 0, scope: Scope = EVERY_TEAM) -> list[AuditEntry]:
        check_page(limit, offset)
        actor = check_optional_text(actor or None, "actor", MAX_NAME)
        action = check_optional_text(action or None, "action", MAX_NAME)
        return self._repo.list(actor, action, limit, offset, scope)
