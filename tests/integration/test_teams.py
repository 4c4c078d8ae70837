"""Teams on every database (docs/teams.md): a team is deleted only without tasks and alert rules,
and never from under a task or an alert rule being put in it at the same instant."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.errors import ConfigError
from scheduler_core.runtime.accounts import Accounts
from scheduler_core.store import TaskRepository
from scheduler_core.store.alerts import AlertRepository


def test_a_team_being_given_a_task_is_not_deleted_under_it(engine: Engine) -> None:
    """The task's INSERT holds the team's row shared until it commits; the deletion locks the row,
    waits, then counts the team's tasks and refuses. Without the lock both commit: a task in no team."""
    accounts = Accounts(engine)
    accounts.create_team("payments")
    repo = TaskRepository(engine)
    outcome: list[object] = []
    with engine.connect() as conn, conn.begin():
        repo.insert(TaskDefinition(id="ledger", name="Ledger", cron="0 1 * * *", team="payments"), conn)

        def delete() -> None:
            try:
                outcome.append(accounts.delete_team("payments"))
            except ConfigError as exc:
                outcome.append(exc)

        deleting = threading.Thread(target=delete)
        deleting.start()
        time.sleep(1.0)  # the deletion is under way: it must wait for this transaction
        assert outcome == [], f"deleted while a task was being put in the team: {outcome}"
    deleting.join(timeout=60)
    assert len(outcome) == 1 and isinstance(outcome[0], ConfigError), outcome
    assert "still has 1 task(s)" in str(outcome[0])
    assert accounts.teams() == ["default", "payments"] and repo.get("ledger").team == "payments"


def test_a_team_being_given_an_alert_rule_is_not_deleted_under_it(engine: Engine) -> None:
    """The rule's save holds the team's row shared until it commits (held here just after its
    INSERT): the deletion waits, then finds the rule and refuses. Without the lock the deletion
    would not see the uncommitted rule and both would commit: a rule of no team."""
    accounts = Accounts(engine)
    accounts.create_team("payments")
    inserted, release = threading.Event(), threading.Event()

    def hold(conn: object, cursor: object, statement: str, *args: object) -> None:
        if threading.current_thread().name == "saver" and statement.lstrip().upper().startswith(
                "INSERT INTO ALERT_RULES"):
            inserted.set()
            release.wait(30)

    saved: list[object] = []
    outcome: list[object] = []

    def delete() -> None:
        try:
            outcome.append(accounts.delete_team("payments"))
        except ConfigError as exc:
            outcome.append(exc)

    event.listen(engine, "after_cursor_execute", hold)
    try:
        saver = threading.Thread(target=lambda: saved.append(AlertRepository(engine).save_rule(
            "payments-failed", "payments", {"name": "payments-failed"}, None)), name="saver")
        saver.start()
        assert inserted.wait(30), "the rule's INSERT did not run"
        deleting = threading.Thread(target=delete)
        deleting.start()
        time.sleep(1.0)  # the deletion is under way: it must wait for the rule's transaction
        assert outcome == [], f"deleted while a rule was being put in the team: {outcome}"
        release.set()
        saver.join(timeout=60)
        deleting.join(timeout=60)
    finally:
        release.set()
        event.remove(engine, "after_cursor_execute", hold)
    assert saved == [True]
    assert len(outcome) == 1 and isinstance(outcome[0], ConfigError), outcome
    assert "alert rules (payments-failed)" in str(outcome[0])
    assert accounts.teams() == ["default", "payments"]


def test_a_team_without_tasks_is_deleted_with_its_roles_and_default_stays(engine: Engine) -> None:
    accounts = Accounts(engine)
    accounts.create_team("payments")
    accounts.create("pat", "viewer", "x")
    accounts.set_grants("pat", {"payments": "operator", "default": "viewer"}, accounts.get("pat").updated_at)
    assert accounts.delete_team("payments") == 1
    assert accounts.grants("pat") == {"default": "viewer"} and accounts.teams() == ["default"]
    with pytest.raises(ConfigError) as caught:
        accounts.delete_team("default")
    assert caught.value.field == "team"
    with pytest.raises(ConfigError):
        accounts.delete_team("payments")
