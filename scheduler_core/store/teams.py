"""Teams and the roles users hold in them (``teams``, ``team_grants``: migration 0025,
docs/teams.md). Grants are read and written inside the caller's transaction, beside the user
row they belong to (store/users.py, store/logins.py, store/api_tokens.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, delete, func, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql import ColumnElement

from scheduler_core.access import DEFAULT_TEAM, Scope
from scheduler_core.db.account_tables import team_grants, teams
from scheduler_core.db.clock import db_now_ms, to_ms
from scheduler_core.db.tables import alert_rules, executions, logs, tasks
from scheduler_core.errors import ConfigError
from scheduler_core.statuses import ROLES
from scheduler_core.store.dialect import greatest
from scheduler_core.store.transactions import one_row, read, write


@dataclass(frozen=True)
class Team:
    id: str
    name: str
    created_at: int
    updated_at: int


def _team(row: Any) -> Team:
    return Team(row.id, row.name, to_ms(row.created_at, "created_at"), to_ms(row.updated_at, "updated_at"))


class TeamRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def all(self) -> list[Team]:
        query = select(teams).order_by(teams.c.id)
        return [_team(r) for r in read(self.engine, lambda c: c.execute(query).all())]

    def create(self, team_id: str, name: str) -> Team:
        """A new team (both values checked by the caller); ConfigError naming ``team`` when the id is taken."""
        def work(conn: Connection) -> Team:
            now = db_now_ms()
            try:
                with conn.begin_nested():
                    conn.execute(teams.insert().values(id=team_id, name=name, created_at=now, updated_at=now))
            except IntegrityError:
                raise ConfigError("team", f"a team {team_id!r} exists already") from None
            return _team(conn.execute(select(teams).where(teams.c.id == team_id)).one())
        return write(self.engine, work)

    def rename(self, team_id: str, name: str) -> Team:
        """A team's display name (its id never changes); ConfigError naming ``team`` when there is none."""
        def work(conn: Connection) -> Team:
            changed = conn.execute(update(teams).where(teams.c.id == team_id).values(
                name=name, updated_at=greatest(conn, db_now_ms(), teams.c.updated_at + 1)))
            if not one_row(changed, f"renaming team {team_id!r}"):
                raise ConfigError("team", f"names no team here: {team_id!r}")
            return _team(conn.execute(select(teams).where(teams.c.id == team_id)).one())
        return write(self.engine, work)

    def delete(self, team_id: str) -> int:
        """Delete a team that has no task and no stored alert rule, and every role granted in it
        (how many). The team's row is locked first and its tasks and rules read after: one being
        put in it meanwhile (which holds the row shared, ``check_team_exists``) is waited for and
        seen, so none is left in no team. Its history, alerts and audit entries keep its id."""
        def work(conn: Connection) -> int:
            if conn.execute(select(teams.c.id).where(teams.c.id == team_id).with_for_update()).first() is None:
                raise ConfigError("team", f"names no team here: {team_id!r}")
            held = len(conn.execute(select(tasks.c.id).where(tasks.c.team == team_id).limit(101)
                                    .with_for_update(read=True)).all())
            if held:
                count = "more than 100" if held > 100 else str(held)
                raise ConfigError("team", f"{team_id!r} still has {count} task(s): move or delete them first")
            rules = conn.execute(select(alert_rules.c.name).where(alert_rules.c.team == team_id).limit(6)
                                 .with_for_update(read=True)).scalars().all()
            if rules:
                raise ConfigError("team", f"{team_id!r} still has alert rules ({', '.join(sorted(rules)[:5])}"
                                          f"{', ...' if len(rules) > 5 else ''}): move or delete them first")
            grants = conn.execute(delete(team_grants).where(team_grants.c.team == team_id)).rowcount
            conn.execute(delete(teams).where(teams.c.id == team_id))
            return int(grants or 0)
        return write(self.engine, work)


def check_team_exists(conn: Connection, team: str, field: str = "team") -> None:
    """``team`` is a team here (its row held shared until the caller commits: it cannot be deleted
    under a task being put in it); ``ConfigError`` naming ``field`` otherwise."""
    if conn.execute(select(teams.c.id).where(teams.c.id == team).with_for_update(read=True)).first() is None:
        raise ConfigError(field, f"names no team here: {team!r}")


def freeze_history(conn: Connection, task_id: str, team: str) -> None:
    """A task leaves ``team`` (moved or deleted): its executions and logs that followed its team
    (``team`` NULL) stay ``team``'s, so a task of that id in another team never shows them."""
    for table in (executions, logs):
        conn.execute(update(table).where(table.c.task_id == task_id, table.c.team.is_(None)).values(team=team))


def history_in(table: Table, scope: Scope) -> list[ColumnElement[bool]]:
    """The condition that a history row (``executions`` or ``logs``) is of a team in ``scope``: its
    own ``team`` when a move or deletion wrote it; a log row, else its execution's (a run that
    finished after its task moved writes its log later, with no team); else its task's (a row of a
    task deleted before teams existed is ``default``'s: migration 0026). No condition at all for
    every team: a global caller's reads are as they were."""
    if scope.teams is None:
        return []
    owner = select(tasks.c.team).where(tasks.c.id == table.c.task_id).correlate(table).scalar_subquery()
    if table is logs:
        run = (select(executions.c.team).where(executions.c.occurrence_id == logs.c.occurrence_id)
               .correlate(logs).scalar_subquery())
        return [func.coalesce(logs.c.team, run, owner, DEFAULT_TEAM).in_(sorted(scope.teams))]
    return [func.coalesce(table.c.team, owner, DEFAULT_TEAM).in_(sorted(scope.teams))]


def audit_team(action: str, target: str | None) -> Any:
    """The team an audit entry is about, as an expression its own INSERT reads (so it is the team
    at that instant): a task's (``task.*``, the target a task id), an execution's or a log's
    (``execution.*``, ``log.*``, the target an occurrence id); None when the target names none."""
    kind = action.partition(".")[0]
    if target is None or kind not in ("task", "execution", "log"):
        return None
    if kind == "task":
        return select(tasks.c.team).where(tasks.c.id == target).scalar_subquery()
    owner = select(tasks.c.team).where(tasks.c.id == executions.c.task_id).scalar_subquery()
    return (select(func.coalesce(executions.c.team, owner, DEFAULT_TEAM))
            .where(executions.c.occurrence_id == target).scalar_subquery())


def grants_of(conn: Connection, name: str) -> dict[str, str]:
    """``name``'s role in each team that grants one (team -> role)."""
    rows = conn.execute(select(team_grants.c.team, team_grants.c.role).where(team_grants.c.username == name))
    return {team: role for team, role in rows}


def check_grants(conn: Connection, grants: Mapping[str, str], field: str = "grants") -> None:
    """Every team named exists and every role is one; ``ConfigError`` naming ``field`` otherwise."""
    for role in grants.values():
        if role not in ROLES:
            raise ConfigError(field, f"must name roles among {', '.join(ROLES)} (got {role!r})")
    if grants:
        known = set(conn.execute(select(teams.c.id).where(teams.c.id.in_(list(grants)))  # held: not deleted under it
                                 .with_for_update(read=True)).scalars())
        unknown = sorted(set(grants) - known)
        if unknown:
            raise ConfigError(field, f"names no team here: {unknown[0]!r}")


def replace_grants(conn: Connection, name: str, grants: Mapping[str, str]) -> bool:
    """``name``'s grants become exactly ``grants`` (checked); True when anything changed."""
    check_grants(conn, grants)
    current = grants_of(conn, name)
    if current == dict(grants):
        return False
    gone = [team for team in current if team not in grants]
    if gone:
        conn.execute(delete(team_grants).where(team_grants.c.username == name, team_grants.c.team.in_(gone)))
    for team, role in grants.items():
        if team not in current:
            conn.execute(team_grants.insert().values(username=name, team=team, role=role, created_at=db_now_ms()))
        elif current[team] != role:
            conn.execute(update(team_grants).where(team_grants.c.username == name, team_grants.c.team == team)
                         .values(role=role))
    return True
