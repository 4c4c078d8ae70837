"""Migrations: idempotent, safe from two processes at once, and equal to the model."""

from __future__ import annotations

import subprocess
import sys

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import insert, inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from scheduler_core.db import close_engine, create_engine, migration_state, upgrade
from scheduler_core.db.migrate import VERSION_TABLE, alembic_config, head_revision
from scheduler_core.db.tables import alert_facts, alert_rules, executions, metadata, reach_queue, slots
from tests.conftest import TestDatabase
from tests.helpers.journal import execution_row


def _cli_upgrade(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "scheduler_core.cli", "db", "upgrade", "--database-url", url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_upgrade_twice_is_a_no_op(empty_database: TestDatabase) -> None:
    engine = create_engine(empty_database.url)
    try:
        assert migration_state(engine).current is None
        assert upgrade(engine).up_to_date
        assert upgrade(engine).current == head_revision()
        assert set(inspect(engine).get_table_names()) >= {"tasks", "slots", "executions", "logs", "nodes"}
    finally:
        close_engine(engine)


def test_two_processes_upgrading_at_once(empty_database: TestDatabase) -> None:
    procs = [_cli_upgrade(empty_database.url) for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    assert sorted("empty ->" in out for out, _ in outputs) == [False, True]
    engine = create_engine(empty_database.url)
    try:
        assert migration_state(engine).up_to_date
    finally:
        close_engine(engine)


def test_migrated_schema_matches_the_model(engine: Engine) -> None:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE, "compare_type": True})
        diff = compare_metadata(context, metadata)
        conn.rollback()
    assert diff == []


def _execution(occurrence_id: str, key: str | None = None, task_id: str = "t") -> dict[str, object]:
    return {"occurrence_id": occurrence_id, "task_id": task_id, "task_revision": 1, "trigger": "manual",
            "idempotency_key": key, "status": "running", "sequence": 1, "attempt": 1, "max_attempts": 1,
            "attempts": [], "created_at": 1, "updated_at": 1}


@pytest.mark.parametrize(
    ("table", "first", "second"),
    [
        (executions, _execution("occ-1"), _execution("occ-1")),  # occurrence id is the primary key
        (executions, _execution("occ-1", "k"), _execution("occ-2", "k")),  # (task, idempotency key)
        (slots, {"task_id": "t", "updated_at": 1}, {"task_id": "t", "updated_at": 2}),  # one slot per task
    ],
    ids=["occurrence-id", "idempotency-key", "one-slot-per-task"],
)
def test_schema_invariants_refuse_violations(engine: Engine, table: object, first: dict[str, object],
                                            second: dict[str, object]) -> None:
    with engine.begin() as conn:
        conn.execute(insert(table), first)  # type: ignore[arg-type]
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(insert(table), second)  # type: ignore[arg-type]


def test_keyless_triggers_and_other_tasks_do_not_collide(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(insert(executions), [_execution("a"), _execution("b"), _execution("c", "k", task_id="u"),
                                          _execution("d", "k", task_id="v")])


def test_team_namespaces_keep_every_users_roles_in_the_default_team(empty_database: TestDatabase) -> None:
    """Migration 0025: admins stay global admins; viewers and operators keep their role as a
    grant in ``default`` (no global role); every existing task is ``default``'s."""
    engine = create_engine(empty_database.url)
    try:
        upgrade(engine, "0024")
        with engine.begin() as conn:
            for name, role in (("ann", "admin"), ("oscar", "operator"), ("vera", "viewer")):
                conn.execute(text("INSERT INTO users (username, password_hash, role, disabled, created_at, updated_at)"
                                  " VALUES (:n, 'x', :r, :d, 5, 7)"), {"n": name, "r": role, "d": False})
            conn.execute(text("INSERT INTO tasks (id, name, cron, timezone, enabled, delete_after_run, idempotent, "
                              "revision, created_at, updated_at) VALUES ('t', 't', '* * * * *', 'UTC', :t, :f, :f, "
                              "1, 1, 1)"), {"t": True, "f": False})
        upgrade(engine)
        with engine.connect() as conn:
            roles = dict(conn.execute(text("SELECT username, role FROM users")).all())
            grants = {(u, t, r) for u, t, r in conn.execute(text("SELECT username, team, role FROM team_grants"))}
            task_team = conn.execute(text("SELECT team FROM tasks WHERE id = 't'")).scalar_one()
            teams = conn.execute(text("SELECT id FROM teams")).scalars().all()
            conn.rollback()
        assert roles == {"ann": "admin", "oscar": None, "vera": None}
        assert grants == {("oscar", "default", "operator"), ("vera", "default", "viewer")}
        assert (task_team, teams) == ("default", ["default"])
    finally:
        close_engine(engine)


def test_the_audit_trail_s_and_deleted_tasks_entries_become_the_default_team_s(
        empty_database: TestDatabase) -> None:
    """Migration 0026: entries about tasks, executions and logs were the one team's; the others
    (users, tokens, templates) are about no one team. Runs of a task deleted before teams are
    ``default``'s (not whichever team reuses the id); a live task's keep following it."""
    engine = create_engine(empty_database.url)
    try:
        upgrade(engine, "0025")
        with engine.begin() as conn:
            for n, action in enumerate(("task.create", "execution.resolve_unknown", "log.repair_all", "user.role",
                                        "token.create", "template.save")):
                conn.execute(text("INSERT INTO audit_log (id, at, actor, action, target) "
                                  "VALUES (:i, :a, 'x', :c, 't')"), {"i": f"e{n}", "a": n, "c": action})
            conn.execute(text("INSERT INTO tasks (id, name, cron, timezone, enabled, delete_after_run, idempotent, "
                              "revision, created_at, updated_at) VALUES ('kept', 'k', '* * * * *', 'UTC', :t, :f, "
                              ":f, 1, 1, 1)"), {"t": True, "f": False})
            conn.execute(insert(executions), [execution_row("o-kept", 1, task_id="kept"),
                                              execution_row("o-gone", 1, task_id="deleted-long-ago")])
        upgrade(engine)
        with engine.connect() as conn:
            teams = dict(conn.execute(text("SELECT action, team FROM audit_log")).all())
            runs = dict(conn.execute(text("SELECT occurrence_id, team FROM executions")).all())
            conn.rollback()
        assert teams == {"task.create": "default", "execution.resolve_unknown": "default", "log.repair_all": "default",
                         "user.role": None, "token.create": None, "template.save": None}
        assert runs == {"o-kept": None, "o-gone": "default"}  # a live task's runs follow it; an orphan's stay
    finally:
        close_engine(engine)


def _queued(queue_id: str, rule: str | None) -> dict[str, object]:
    return {"queue_id": queue_id, "provider": "log", "recipient": "x", "body": "b", "status": "sent",
            "attempt_count": 1, "max_attempts": 3, "retry_delay_ms": 1, "max_retry_delay_ms": 1, "next_attempt_at": 1,
            "created_at": 1, "updated_at": 1, "alert_rule": rule}


def _ops_with_task_a(conn: Connection) -> None:
    """The team ``ops`` and its task ``a``, written as the schema of 0026 or later has them."""
    conn.execute(text("INSERT INTO teams (id, name, created_at, updated_at) VALUES ('ops', 'Ops', 1, 1)"))
    conn.execute(text("INSERT INTO tasks (id, name, cron, timezone, enabled, delete_after_run, idempotent, "
                      "revision, created_at, updated_at, team) VALUES ('a', 'a', '* * * * *', 'UTC', :t, "
                      ":f, :f, 1, 1, 1, 'ops')"), {"t": True, "f": False})


def test_alerts_already_queued_about_a_task_become_its_team_s(empty_database: TestDatabase) -> None:
    """Migration 0027: an alert queued about a task is that task's team's (``default`` when the task
    is gone); an alert about no one team (a node lost, a test alert) and a message the application
    sent stay no team's; every stored rule stays global."""
    engine = create_engine(empty_database.url)
    try:
        upgrade(engine, "0026")
        with engine.begin() as conn:
            _ops_with_task_a(conn)
            facts = [("q-task", "execution.failed", "a"), ("q-gone", "task.paused", "gone"),
                     ("q-node", "node.lost", "a"), ("q-test", "test", "test:1")]
            conn.execute(insert(alert_facts), [{"rule": "r", "event_key": queue_id, "event": event, "scope": scope,
                                                "queue_id": queue_id, "folded": False, "created_at": 1}
                                               for queue_id, event, scope in facts])
            conn.execute(insert(reach_queue), [*(_queued(queue_id, "r") for queue_id, _, _ in facts),
                                               _queued("q-app", None)])
            conn.execute(insert(alert_rules).values(name="r", definition={}, created_at=1, updated_at=1))
        upgrade(engine)
        with engine.connect() as conn:
            teams = dict(conn.execute(text("SELECT queue_id, team FROM reach_queue")).all())
            rule_team = conn.execute(text("SELECT team FROM alert_rules")).scalar_one()
            conn.rollback()
        assert teams == {"q-task": "ops", "q-gone": "default", "q-node": None, "q-test": None, "q-app": None}
        assert rule_team is None
    finally:
        close_engine(engine)


def test_the_metric_totals_are_given_the_team_their_task_was_in(empty_database: TestDatabase) -> None:
    """Migration 0028: a task's counts are its team's; a deleted task's, the team its history rows
    were left with; deliveries and a task of which nothing is known, no team. Downgraded, the
    counts of one (metric, task, label) are summed again."""
    engine = create_engine(empty_database.url)
    try:
        upgrade(engine, "0027")
        with engine.begin() as conn:
            _ops_with_task_a(conn)
            conn.execute(insert(executions), [execution_row("run-of-gone", 1, task_id="gone") | {"team": "ops"}])
            conn.execute(text("INSERT INTO metric_totals (metric, scope, label, value, created_at) VALUES "
                              "('executions', 'a', 'success', 3, 1), ('executions', 'gone', 'failed', 2, 2), "
                              "('executions', 'nobody', 'success', 1, 3), ('deliveries', 'mail', 'sent', 4, 4), "
                              "('task', 'a', '', 0, 5)"))
        upgrade(engine)
        with engine.connect() as conn:
            teams = {row[0]: row[1] for row in conn.execute(text("SELECT scope, team FROM metric_totals "
                                                                 "WHERE metric <> 'task'"))}
            conn.execute(text("INSERT INTO metric_totals (metric, scope, label, team, value, created_at) "
                              "VALUES ('executions', 'a', 'success', 'default', 5, 6)"))
            conn.commit()
        assert teams == {"a": "ops", "gone": "ops", "nobody": "", "mail": ""}
        with engine.connect() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "0027")
            conn.commit()
            summed = conn.execute(text("SELECT value FROM metric_totals WHERE scope = 'a' AND label = 'success'"))
            assert summed.scalar_one() == 8
            conn.rollback()
    finally:
        close_engine(engine)
