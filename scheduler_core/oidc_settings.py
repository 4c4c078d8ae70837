"""Single sign-on settings (OpenID Connect), checked at start-up like every other setting.

``HAI_OIDC_ISSUER`` turns sign-on on. ``HAI_OIDC_CLIENT_ID``; the secret by reference,
``HAI_OIDC_CLIENT_SECRET_FILE`` (a file holding it) or ``HAI_OIDC_CLIENT_SECRET``;
``HAI_OIDC_SCOPES``, ``HAI_OIDC_GROUPS_CLAIM``, ``HAI_OIDC_USERNAME_CLAIM``;
``HAI_OIDC_GROUP_ROLES``, ``group=team:role`` entries separated by commas or new lines (``*``:
every team), the highest role granted being the user's; ``HAI_OIDC_REFRESH_S``, how old the groups
a session acts on may be; ``HAI_OIDC_NAME``, the button's label; ``HAI_LOCAL_LOGIN=off`` turns
the password form off. The issuer must be https except with ``HAI_ENV=development``.

What only the provider can tell (discovery, its claims) is checked when the dashboard starts
(webapp/oidc.py). The rules and their reasons: docs/sign-on.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from scheduler_core.access import Access, higher
from scheduler_core.errors import ConfigError
from scheduler_core.statuses import ROLES
from scheduler_core.validation import check_int, check_text, shown

ALL_TEAMS = "*"
TEAM = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")  # a team id (validation.check_team); that it exists: serve checks
DEFAULT_SCOPES = ("openid", "profile", "email", "groups")
CLAIM = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}")
SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]{1,64}")  # RFC 6749 scope-token characters
GROUP = re.compile(r"[^\s=,]{1,255}")
MAX_GROUP_ROLES = 500
MAX_REFRESH_S = 3600
MAX_SECRET = 1024
VARIABLES = ("OIDC_ISSUER", "OIDC_CLIENT_ID", "OIDC_CLIENT_SECRET", "OIDC_CLIENT_SECRET_FILE", "OIDC_SCOPES",
             "OIDC_GROUPS_CLAIM", "OIDC_USERNAME_CLAIM", "OIDC_GROUP_ROLES", "OIDC_REFRESH_S", "OIDC_NAME",
             "LOCAL_LOGIN")
Lookup = Callable[[str], tuple[Any, str]]  # a setting's name -> (its value or None, where it came from)


@dataclass(frozen=True)
class GroupRole:
    group: str
    team: str  # a team, or ALL_TEAMS
    role: str


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    groups_claim: str = "groups"
    username_claim: str = "preferred_username"
    group_roles: tuple[GroupRole, ...] = ()
    refresh_s: int = 60
    name: str = "single sign-on"

    @property
    def teams(self) -> list[str]:
        """The teams the group mapping grants roles in (``*`` aside): each must exist (``serve`` checks)."""
        return sorted({mapping.team for mapping in self.group_roles if mapping.team != ALL_TEAMS})

    def access_of(self, groups: Any) -> Access:
        """What the ``groups`` (a claim's value: a list of names, or one name) grant: the highest
        role of the ``*`` entries as the global role, and per team the highest of its entries."""
        if isinstance(groups, str):
            names = {groups}
        elif isinstance(groups, list):
            names = {g for g in groups if isinstance(g, str)}
        else:
            names = set()
        granted: dict[str, str | None] = {}
        for mapping in self.group_roles:
            if mapping.group in names:
                granted[mapping.team] = higher(granted.get(mapping.team), mapping.role)
        global_role = granted.pop(ALL_TEAMS, None)
        return Access.of(global_role, {team: role for team, role in granted.items() if role is not None})


@dataclass(frozen=True)
class SignOn:
    """How people sign in: with the identity provider (``oidc``, None when off) and/or with a
    local account's password (``local``)."""

    oidc: OidcSettings | None = None
    local: bool = True


def read_sign_on(lookup: Lookup, environment: str) -> SignOn:
    """The checked sign-on settings; raises ``ConfigError`` naming the first bad one."""
    local = _switch(*lookup("LOCAL_LOGIN"))
    issuer_value, issuer_where = lookup("OIDC_ISSUER")
    if issuer_value is None:
        for name in VARIABLES[1:-1]:
            value, where = lookup(name)
            if value is not None:
                raise ConfigError(where, "is set but single sign-on is off: set HAI_OIDC_ISSUER too")
        if not local:
            raise ConfigError("HAI_LOCAL_LOGIN", "off needs single sign-on (HAI_OIDC_ISSUER): nobody could sign in")
        return SignOn(None, local)
    return SignOn(OidcSettings(
        issuer=_issuer(issuer_value, issuer_where, environment),
        client_id=_text(*lookup("OIDC_CLIENT_ID"), required=True),
        client_secret=_secret(lookup),
        scopes=_scopes(*lookup("OIDC_SCOPES")),
        groups_claim=_claim(*lookup("OIDC_GROUPS_CLAIM"), default="groups"),
        username_claim=_claim(*lookup("OIDC_USERNAME_CLAIM"), default="preferred_username"),
        group_roles=_group_roles(*lookup("OIDC_GROUP_ROLES")),
        refresh_s=_refresh(*lookup("OIDC_REFRESH_S")),
        name=_text(*lookup("OIDC_NAME"), required=False) or "single sign-on",
    ), local)


def _text(value: Any, where: str, required: bool) -> str:
    if value is None:
        if required:
            raise ConfigError(where, "is required with single sign-on (HAI_OIDC_ISSUER)")
        return ""
    return check_text(value, where, 255, single_line=True).strip()


def _switch(value: Any, where: str) -> bool:
    if value is None:
        return True
    text = value.strip().lower() if isinstance(value, str) else value
    if text in ("on", "true", "1", True):
        return True
    if text in ("off", "false", "0", False):
        return False
    raise ConfigError(where, f"must be on or off (got {shown(value)})")


def _issuer(value: Any, where: str, environment: str) -> str:
    text = check_text(value, where, 2048, single_line=True).strip()
    parts = urlsplit(text)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ConfigError(where, f"must be the provider's https:// address (got {shown(value)})")
    if parts.scheme == "http" and environment != "development":
        raise ConfigError(where, "must be https:// outside development (HAI_ENV=development allows http:// for a "
                                 "provider in a test)")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(where, "must be the issuer address alone: no query, fragment or credentials")
    return text  # as the provider writes it: its discovery document must name the same (OpenID Discovery 4.3)


def _secret(lookup: Lookup) -> str:
    value, where = lookup("OIDC_CLIENT_SECRET")
    path, path_where = lookup("OIDC_CLIENT_SECRET_FILE")
    if value is not None and path is not None:
        raise ConfigError(path_where, "set either HAI_OIDC_CLIENT_SECRET or HAI_OIDC_CLIENT_SECRET_FILE, not both")
    if path is not None:
        where, file = path_where, Path(check_text(path, path_where, 4096, single_line=True).strip())
        try:
            with file.open("rb") as handle:
                raw = handle.read(MAX_SECRET + 2)
        except OSError as exc:
            raise ConfigError(where, f"cannot read the client secret file: {exc.strerror}") from None
        try:
            value = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise ConfigError(where, "the client secret file is not UTF-8 text") from None
    if value is None:
        raise ConfigError("HAI_OIDC_CLIENT_SECRET_FILE", "is required with single sign-on (or HAI_OIDC_CLIENT_SECRET)")
    if not isinstance(value, str) or not value or len(value) > MAX_SECRET or not value.isprintable():
        raise ConfigError(where, f"the client secret must be 1..{MAX_SECRET} printable characters")
    return value


def _scopes(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_SCOPES
    items = value.split() if isinstance(value, str) else value if isinstance(value, list) else None
    if not items or len(items) > 32 or not all(isinstance(s, str) and SCOPE.fullmatch(s) for s in items):
        raise ConfigError(where, f"must be up to 32 scope names separated by spaces (got {shown(value)})")
    if "openid" not in items:
        raise ConfigError(where, "must include openid")
    return tuple(dict.fromkeys(items))


def _claim(value: Any, where: str, default: str) -> str:
    if value is None:
        return default
    if not isinstance(value, str) or CLAIM.fullmatch(value.strip()) is None:
        raise ConfigError(where, f"must be a claim name: letters, digits and _ . : - (got {shown(value)})")
    return value.strip()


def _group_roles(value: Any, where: str) -> tuple[GroupRole, ...]:
    if value is None:
        raise ConfigError(where, "is required with single sign-on: which group grants which role, e.g. "
                                 "platform=*:admin, payments-ops=default:operator")
    text = check_text(value, where, 100_000)
    entries = [e.strip() for e in re.split(r"[,\n]", text) if e.strip()]
    if not entries or len(entries) > MAX_GROUP_ROLES:
        raise ConfigError(where, f"must map 1..{MAX_GROUP_ROLES} groups, as group=team:role")
    found: dict[tuple[str, str], GroupRole] = {}
    for entry in entries:
        group, _, grant = entry.rpartition("=")
        team, _, role = grant.partition(":")
        group, team, role = group.strip(), team.strip(), role.strip()
        if not GROUP.fullmatch(group) or not team or not role:
            raise ConfigError(where, f"{shown(entry)} is not group=team:role")
        if team != ALL_TEAMS and not TEAM.fullmatch(team):
            raise ConfigError(where, f"{shown(entry)} names {shown(team)}, which is not a team id (lower-case "
                                     f"letters, digits and -) nor {ALL_TEAMS} (every team)")
        if role not in ROLES:
            raise ConfigError(where, f"{shown(entry)} names an unknown role {shown(role)} (roles: {', '.join(ROLES)})")
        if (group, team) in found:
            raise ConfigError(where, f"group {shown(group)} is mapped twice in team {shown(team)}")
        found[(group, team)] = GroupRole(group, team, role)
    return tuple(found.values())


def _refresh(value: Any, where: str) -> int:
    if value is None:
        return 60
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    return check_int(value, where, 0, MAX_REFRESH_S)
