"""The Scheduler's public API on every database: definitions, triggers, outcomes, operator API."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig, SchedulerTaskSkippedError, TaskDefinition
from scheduler_core.db.tables import executions, slots, tasks
from scheduler_core.errors import (
    ConfigError,
    ConflictError,
    InitFailedError,
    InvalidCronError,
    LogPersistFailedError,
    NotInitializedError,
    TaskAlreadyExistsError,
    TaskNotFoundError,
)
from tests.helpers.race import race

MakeScheduler = Callable[..., Scheduler]


def _task(task_id: str = "report", **fields: Any) -> TaskDefinition:
    fields.setdefault("cron", "0 2 * * *")
    return TaskDefinition(id=task_id, name=fields.pop("name", task_id.title()), **fields)


def _rows(engine: Engine, table: Any) -> list[Any]:
    with engine.connect() as conn:
        rows = list(conn.execute(select(table)))
        conn.rollback()
    return rows


# --- definitions --------------------------------------------------------------------------


def test_register_update_unregister(make_node: MakeScheduler, engine: Engine) -> None:
    scheduler = make_node()
    stored = scheduler.register(_task(retry={"max_attempts": 3, "backoff_ms": [1000, 5000]}, params={"a": 1}))
    assert stored.revision == 1 and stored.retry is not None and stored.retry.backoff_ms == (1000, 5000)
    assert [t.id for t in scheduler.tasks] == ["report"]
    changed = scheduler.update_task("report", name="Nightly", retry=None)
    assert changed.revision == 2 and changed.retry is None and changed.params == {"a": 1}
    assert changed.updated_at is not None and changed.updated_at > (stored.updated_at or 0) - 1
    with pytest.raises(ConflictError):
        scheduler.update_task("report", name="x", expected_updated_at=stored.updated_at)
    scheduler.unregister("report")
    assert scheduler.tasks == () and _rows(engine, tasks) == []
    with pytest.raises(TaskNotFoundError):
        scheduler.unregister("report")
    with pytest.raises(TaskNotFoundError):
        scheduler.update_task("report", name="x")


@pytest.mark.parametrize(
    ("fields", "error", "field"),
    [
        ({"id": ""}, ConfigError, "id"),
        ({"id": "x" * 129}, ConfigError, "id"),
        ({"cron": "61 * * * *"}, InvalidCronError, None),
        ({"cron": "* * * *"}, InvalidCronError, None),
        ({"timezone": "Mars/Olympus"}, ConfigError, "timezone"),
        ({"retry": {"max_attempts": 0}}, ConfigError, "retry.max_attempts"),
        ({"retry": {"max_attempts": 101}}, ConfigError, "retry.max_attempts"),
        ({"retry": {"max_attempts": 2, "backoff_ms": [-1]}}, ConfigError, "retry.backoff_ms[0]"),
        ({"retry": {"attempts": 2}}, ConfigError, "retry.attempts"),
        ({"handler": {"kind": "ftp"}}, ConfigError, "handler.kind"),
        ({"handler": {"kind": "hook", "url": "x"}}, ConfigError, "handler.url"),
        ({"params": [1, 2]}, ConfigError, "params"),
        ({"params": {"x": float("nan")}}, ConfigError, "params.x"),
        ({"enabled": "yes"}, ConfigError, "enabled"),
        ({"name": ""}, ConfigError, "name"),
    ],
)
def test_bad_definitions_are_refused_and_change_nothing(make_node: MakeScheduler, engine: Engine,
                                                        fields: dict[str, Any], error: type[Exception],
                                                        field: str | None) -> None:
    scheduler = make_node()
    scheduler.register(_task("keep"))
    fields = dict(fields)  # the parameter is shared between backends
    task_id = fields.pop("id", "bad")
    with pytest.raises(error) as info:
        scheduler.register(_task(task_id, **fields))
    if field is not None:
        assert info.value.field == field  # type: ignore[attr-defined]
    if fields:  # the same change as an update is refused too
        with pytest.raises(error):
            scheduler.update_task("keep", **fields)
    assert [r.id for r in _rows(engine, tasks)] == ["keep"]
    assert [r.revision for r in _rows(engine, tasks)] == [1]
    assert [t.id for t in scheduler.tasks] == ["keep"]


def test_duplicate_register_is_refused(make_node: MakeScheduler) -> None:
    scheduler = make_node()
    scheduler.register(_task())
    with pytest.raises(TaskAlreadyExistsError):
        scheduler.register(_task(name="Other"))


def test_init_is_all_or_nothing(engine: Engine) -> None:
    good, bad = _task("good"), _task("bad", cron="nope")
    scheduler = Scheduler(engine, SchedulerConfig(), tasks=[good, bad])
    with pytest.raises(InitFailedError):
        scheduler.init()
    assert not scheduler.is_initialized and _rows(engine, tasks) == []
    with pytest.raises(NotInitializedError):
        scheduler.register(good)
    with pytest.raises(InitFailedError):
        Scheduler(engine, tasks=[good, _task("good", name="dup")]).init()
    assert _rows(engine, tasks) == []
    first = Scheduler(engine, tasks=[good])
    first.init()  # declared tasks are stored
    again = Scheduler(engine, tasks=[good])
    again.init()  # the same declaration from another node is not a duplicate
    with pytest.raises(InitFailedError):
        Scheduler(engine, tasks=[_task("good", cron="5 2 * * *")]).init()  # a different one is
    first.close()
    again.close()


def test_init_fails_on_an_unreadable_stored_task(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(tasks.insert().values(id="broken", name="B", cron="not a cron", timezone="UTC", enabled=True,
                                           delete_after_run=False, idempotent=False, revision=1, created_at=1,
                                           updated_at=1))
    scheduler = Scheduler(engine)
    with pytest.raises(InitFailedError, match="broken"):
        scheduler.init()
    assert not scheduler.is_initialized


# --- triggers and outcomes ---------------------------------------------------------------------


def test_trigger_success_and_same_key_returns_same_record(make_node: MakeScheduler, engine: Engine) -> None:
    seen: list[Any] = []

    def execute(event: Any) -> Any:
        seen.append(event.context)
        return {"params": dict(event.context.params)}

    scheduler = make_node(hooks={"on_task_execute": execute})
    scheduler.register(_task(params={"channel": "ops"}))
    log = scheduler.trigger("report", source="cli", idempotency_key="2026-11-29")
    assert (log.status, log.result, log.source, log.persistence.status) == (
        "success", {"params": {"channel": "ops"}}, "cli", "persisted")
    again = scheduler.trigger("report", source="cli", idempotency_key="2026-11-29")
    assert (again.occurrence_id, again.id, again.status) == (log.occurrence_id, log.id, "success")
    assert len(seen) == 1 and seen[0].occurrence_id == log.occurrence_id and seen[0].attempt == 1
    other = scheduler.trigger("report")
    assert other.occurrence_id != log.occurrence_id and len(seen) == 2
    assert [entry.id for entry in scheduler.get_logs(task_id="report", trigger_source="cli")] == [log.id]
    assert all(r.occurrence_id is None for r in _rows(engine, slots))  # slot released


def test_trigger_bad_input(make_node: MakeScheduler) -> None:
    scheduler = make_node()
    scheduler.register(_task())
    with pytest.raises(TaskNotFoundError):
        scheduler.trigger("missing")
    with pytest.raises(ConfigError) as info:
        scheduler.trigger("report", idempotency_key="k" * 129)
    assert info.value.field == "idempotency_key"
    with pytest.raises(ConfigError) as info:
        scheduler.trigger("report", idempotency_key="")
    with pytest.raises(ConfigError):
        scheduler.get_logs(limit=0)
    with pytest.raises(ConfigError):
        scheduler.execution.list_unknown(offset=1_000_001)


@pytest.mark.parametrize(
    ("behaviour", "status"),
    [("raise", "failed"), ("skip", "interrupted"), ("not-json", "failed")],
)
def test_handler_outcomes(make_node: MakeScheduler, behaviour: str, status: str) -> None:
    def execute(event: Any) -> Any:
        if behaviour == "raise":
            raise RuntimeError("boom")
        if behaviour == "skip":
            raise SchedulerTaskSkippedError("not today")
        return object()

    scheduler = make_node(hooks={"on_task_execute": execute})
    scheduler.register(_task())
    log = scheduler.trigger("report")
    assert log.status == status and log.error
    assert scheduler.execution.get(log.occurrence_id).status == status


def test_a_hook_task_no_live_node_can_run_is_missed(make_node: MakeScheduler) -> None:
    """Triggered on a node without hooks, with no live node that has them: journaled ``missed``
    (``no_capable_node``) at once, the slot untouched -- never run on a node that cannot."""
    scheduler = make_node()
    scheduler.register(_task())
    log = scheduler.trigger("report")
    assert (log.status, log.error) == ("missed", "no_capable_node")
    execution = scheduler.execution.get(log.occurrence_id)
    assert (execution.status, execution.reason, execution.owner_node, execution.attempts) == (
        "missed", "no_capable_node", None, ())


def test_idempotent_task_retries_with_backoff_within_budget(make_node: MakeScheduler) -> None:
    calls: list[int] = []

    def execute(event: Any) -> Any:
        calls.append(event.context.attempt)
        if len(calls) < 3:
            raise RuntimeError(f"try {len(calls)}")
        return "ok"

    scheduler = make_node(hooks={"on_task_execute": execute})
    scheduler.register(_task(idempotent=True, retry={"max_attempts": 3, "backoff_ms": [50, 100]}))
    log = scheduler.trigger("report")
    assert (log.status, log.attempt, calls) == ("success", 3, [1, 2, 3])
    journal = scheduler.execution.get(log.occurrence_id)
    assert [a.status for a in journal.attempts] == ["failed", "failed", "success"]
    assert len({a.log_id for a in journal.attempts}) == 3
    assert len(scheduler.get_logs(task_id="report")) == 3


def test_non_idempotent_task_is_not_retried(make_node: MakeScheduler) -> None:
    calls: list[int] = []

    def execute(event: Any) -> Any:
        calls.append(1)
        raise RuntimeError("no")

    scheduler = make_node(hooks={"on_task_execute": execute})
    scheduler.register(_task(retry={"max_attempts": 3}))
    assert scheduler.trigger("report").status == "failed" and len(calls) == 1


def test_busy_slot_journals_skipped(make_node: MakeScheduler) -> None:
    entered, release = threading.Event(), threading.Event()

    def execute(event: Any) -> Any:
        entered.set()
        release.wait(10)
        return "done"

    scheduler = make_node(hooks={"on_task_execute": execute})
    scheduler.register(_task())
    first: list[Any] = []
    worker = threading.Thread(target=lambda: first.append(scheduler.trigger("report")))
    worker.start()
    assert entered.wait(10)
    skipped = scheduler.trigger("report", source="second")
    release.set()
    worker.join()
    assert skipped.status == "skipped" and skipped.error == "slot_busy"
    assert scheduler.execution.get(skipped.occurrence_id).reason == "slot_busy"
    assert first[0].status == "success"


def test_delete_after_run_deletes_only_the_executed_revision(make_node: MakeScheduler, engine: Engine) -> None:
    scheduler = make_node(hooks={"on_task_execute": lambda e: "ok"})
    scheduler.register(_task(delete_after_run=True))
    assert scheduler.trigger("report").status == "success"
    assert _rows(engine, tasks) == [] and scheduler.tasks == ()

    def update_meanwhile(event: Any) -> Any:
        scheduler.update_task("again", name="changed while running")
        return "ok"

    scheduler.set_hooks({"on_task_execute": update_meanwhile})
    scheduler.register(_task("again", delete_after_run=True))
    assert scheduler.trigger("again").status == "success"
    assert [r.name for r in _rows(engine, tasks)] == ["changed while running"]  # the update survives


def test_observer_hook_failure_does_not_change_the_outcome(make_node: MakeScheduler) -> None:
    def explode(event: Any) -> None:
        raise ValueError("observer bug")

    scheduler = make_node(hooks={"on_task_execute": lambda e: 1, "on_task_start": explode,
                                      "on_task_finish": explode})
    scheduler.register(_task())
    assert scheduler.trigger("report").status == "success"


# --- unknown review and log repair ---------------------------------------------------------------


def _make_unknown(scheduler: Scheduler, engine: Engine) -> str:
    """A non-idempotent execution whose owner vanished mid-handler, settled by the scan."""
    from tests.helpers.journal import abandon_running_execution

    return abandon_running_execution(engine, "report", started=True)


def test_resolve_unknown_is_a_compare_and_set(make_node: MakeScheduler, engine: Engine) -> None:
    scheduler = make_node(hooks={"on_task_execute": lambda e: "ok"}, lease_ms=1000)
    scheduler.register(_task())
    occurrence = _make_unknown(scheduler, engine)
    scheduler.start()
    from tests.helpers.journal import wait_for_status

    unknown = wait_for_status(scheduler, occurrence, "unknown")
    assert unknown.reason == "lease_expired"
    assert [e.occurrence_id for e in scheduler.execution.list_unknown()] == [occurrence]
    assert scheduler.trigger("report").status == "skipped"  # the slot stays held
    with pytest.raises(ConfigError):
        scheduler.execution.resolve_unknown(occurrence, "failed", unknown.updated_at)
    with pytest.raises(ConflictError):
        scheduler.execution.resolve_unknown(occurrence, "discarded", unknown.updated_at - 1)
    outcomes = race(lambda: scheduler.execution.resolve_unknown(occurrence, "discarded", unknown.updated_at, "alice",
                                                                "checked"), ConflictError)
    assert outcomes == ["lost", "lost", "lost", "won"]
    resolved = scheduler.execution.get(occurrence)
    assert (resolved.status, resolved.resolved_by, resolved.resolution_reason) == ("discarded", "alice", "checked")
    assert scheduler.trigger("report").status == "success"  # slot released


def test_log_projection_failure_leaves_pending_and_repair_settles_it(make_node: MakeScheduler,
                                                                     engine: Engine) -> None:
    calls: list[int] = []
    scheduler = make_node(hooks={"on_task_execute": lambda e: calls.append(1) or "ok"})
    scheduler.register(_task())
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE logs RENAME TO logs_away"))
    try:
        log = scheduler.trigger("report")
    finally:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE logs_away RENAME TO logs"))
    assert (log.status, log.persistence.status) == ("success", "pending")
    assert [e.occurrence_id for e in scheduler.execution.list_log_failures()] == [log.occurrence_id]
    results = []
    racers = [threading.Thread(target=lambda: results.append(scheduler.execution.repair_log(log.occurrence_id)))
              for _ in range(3)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert all(r.log_persistence == "persisted" for r in results)
    assert calls == [1]  # repair never runs business code
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(text("logs"))).scalar_one() == 1
    assert scheduler.execution.list_log_failures() == []
    assert scheduler.get_logs()[0].id == log.id


def test_repair_refuses_a_log_row_that_contradicts_the_journal(make_node: MakeScheduler,
                                                              engine: Engine) -> None:
    scheduler = make_node(hooks={"on_task_execute": lambda e: "ok"})
    scheduler.register(_task())
    log = scheduler.trigger("report")
    with engine.begin() as conn:
        conn.execute(text("UPDATE logs SET status = 'failed'"))
        conn.execute(executions.update().values(log_persistence="pending"))
    with pytest.raises(LogPersistFailedError):
        scheduler.execution.repair_log(log.occurrence_id)
    assert scheduler.execution.get(log.occurrence_id).log_persistence == "pending"


def test_a_failed_task_write_is_db_save_failed_and_publishes_nothing(make_node: MakeScheduler,
                                                                     engine: Engine) -> None:
    from scheduler_core.errors import DatabaseError, DbSaveFailedError

    scheduler = make_node()
    scheduler.register(_task("keep"))
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE scheduler_meta RENAME TO meta_away"))
    try:
        with pytest.raises(DbSaveFailedError) as info:
            scheduler.register(_task("new"))
        assert info.value.code == "hai:scheduler:026" and "new" in str(info.value)
        with pytest.raises(DbSaveFailedError):
            scheduler.update_task("keep", name="changed")
        with pytest.raises(DatabaseError):
            scheduler.trigger("keep")
    finally:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE meta_away RENAME TO scheduler_meta"))
    assert [t.id for t in scheduler.tasks] == ["keep"] and scheduler.tasks[0].name == "Keep"
    assert [r.id for r in _rows(engine, tasks)] == ["keep"]
