"""What a user may do: a global role (every team; None: none) and a role per team (docs/teams.md).

A user's role in a team is the higher of the two. ``teams(role)`` is the scope of what they may do
with at least ``role``: None for every team (a global role that high), else the teams granting it;
``scope(role)`` is the same as a ``Scope``, the value the runtime's operations and the store's
queries take (``EVERY_TEAM``: no filter, for the CLI and the host's Python).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scheduler_core.statuses import ROLES

DEFAULT_TEAM = "default"  # the team every installation has (migration 0025)


def rank(role: str | None) -> int:
    """A role's place, lowest first; -1 for none."""
    return ROLES.index(role) if role in ROLES else -1


def higher(*roles: str | None) -> str | None:
    best = max(roles, key=rank, default=None)
    return best if rank(best) >= 0 else None


@dataclass(frozen=True)
class Scope:
    """The teams a caller may see (or act in); ``teams`` None: every team."""

    teams: frozenset[str] | None = None

    def allows(self, team: str | None) -> bool:
        return self.teams is None or team in self.teams


EVERY_TEAM = Scope()


@dataclass(frozen=True)
class Access:
    global_role: str | None = None
    grants: tuple[tuple[str, str], ...] = ()  # (team, role), sorted by team

    @classmethod
    def of(cls, global_role: str | None, grants: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> Access:
        pairs = grants.items() if isinstance(grants, Mapping) else grants
        return cls(global_role if rank(global_role) >= 0 else None,
                   tuple(sorted((str(t), str(r)) for t, r in pairs if rank(r) >= 0)))

    def role_in(self, team: str) -> str | None:
        return higher(self.global_role, dict(self.grants).get(team))

    @property
    def highest(self) -> str | None:
        """The highest role anywhere: what the navigation offers (a page of another team's object
        still answers 404)."""
        return higher(self.global_role, *(role for _, role in self.grants))

    def can(self, role: str, team: str | None = None) -> bool:
        """``role`` or higher: in ``team``, or (None) in some team."""
        return rank(self.role_in(team) if team is not None else self.highest) >= rank(role)

    def may(self, role: str, owner: str | None) -> bool:
        """``role`` or higher on an object of team ``owner``; None: an object of no one team
        (every team's, e.g. a message about a node), which needs the global role."""
        return rank(self.role_in(owner) if owner is not None else self.global_role) >= rank(role)

    def teams(self, role: str = "viewer") -> frozenset[str] | None:
        """The teams where the user has ``role`` or higher; None: every team (a global role)."""
        if rank(self.global_role) >= rank(role):
            return None
        return frozenset(team for team, granted in self.grants if rank(granted) >= rank(role))

    def scope(self, role: str = "viewer") -> Scope:
        """``teams(role)`` as a ``Scope``."""
        return Scope(self.teams(role))

    @property
    def nothing(self) -> bool:
        return self.highest is None
