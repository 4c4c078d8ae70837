"""The API boundary on every database: a refused call names its field and changes nothing, and
the same input gets the same answer on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.db import close_engine, create_engine
from scheduler_core.db.tables import metadata, tasks
from scheduler_core.errors import (
    ConfigError,
    DatabaseError,
    InvalidCronError,
    ReachConfigError,
    ReachError,
    TaskNotFoundError,
)
from scheduler_core.reach import Reach
from scheduler_core.store.transactions import one_row, write
from tests.conftest import BACKENDS, create_database, drop_database, server
from tests.helpers.processes import spawn_helper

INPUT = "hai:scheduler:012"
CONFUSABLE_IDS = ("1-nightly", "1-hourly", "01", "1.0", "10", "5-nightly")


def row_counts(engine: Engine) -> dict[str, int]:
    """Rows per table of the whole schema: what "changes nothing" is measured by."""
    with engine.connect() as conn:
        return {table.name: conn.execute(select(func.count()).select_from(table)).scalar_one()
                for table in metadata.sorted_tables}


def task(task_id: str, **fields: Any) -> TaskDefinition:
    return TaskDefinition(**{"id": task_id, "name": f"Task {task_id}", "cron": "0 3 * * *", **fields})


@pytest.fixture
def node(make_node: Callable[..., Scheduler]) -> Scheduler:
    return make_node(hooks={"on_task_execute": lambda event: {"ok": True}})


def refused(call: Callable[[], object], field: str, error: type[Exception] = ConfigError) -> None:
    with pytest.raises(error) as info:
        call()
    assert getattr(info.value, "field", None) == field, str(info.value)


def test_non_string_ids_are_refused_as_input_and_change_nothing(node: Scheduler, engine: Engine) -> None:
    """MariaDB compared ``VARCHAR = 1`` numerically: ``unregister(1)`` deleted four tasks."""
    for task_id in CONFUSABLE_IDS:
        node.register(task(task_id))
    before = row_counts(engine)
    calls: list[tuple[Callable[[], object], str]] = [
        (lambda: node.unregister(1), "task_id"),  # type: ignore[arg-type]
        (lambda: node.update_task(5, enabled=False), "task_id"),  # type: ignore[arg-type]
        (lambda: node.update_task("10", expected_updated_at="1"), "expected_updated_at"),  # type: ignore[arg-type]
        (lambda: node.execution.get(5), "occurrence_id"),  # type: ignore[arg-type]
        (lambda: node.trigger(1), "task_id"),  # type: ignore[arg-type]
        (lambda: node.submit(1.0), "task_id"),  # type: ignore[arg-type]
        (lambda: node.trigger("10", source=1), "source"),  # type: ignore[arg-type]
        (lambda: node.trigger("10", idempotency_key=10), "idempotency_key"),  # type: ignore[arg-type]
        (lambda: node.get_logs(task_id=5), "task_id"),  # type: ignore[arg-type]
        (lambda: node.get_logs(status="bogus"), "status"),
        (lambda: node.get_logs(started_after=2**70), "started_after"),
        (lambda: node.execution.resolve_unknown(5, "success", 1), "occurrence_id"),  # type: ignore[arg-type]
        (lambda: node.execution.resolve_unknown("x", "done", 1), "status"),
        (lambda: node.execution.repair_log(5), "occurrence_id"),  # type: ignore[arg-type]
        (lambda: node.execution.page(status=1), "status"),
        (lambda: node.task_ops.get(1), "task_id"),  # type: ignore[arg-type]
        (lambda: node.task_ops.delete("10", "1"), "expected_updated_at"),  # type: ignore[arg-type]
    ]
    for call, field in calls:
        with pytest.raises(ConfigError) as info:
            call()
        assert info.value.code == INPUT and info.value.field == field, str(info.value)
    assert row_counts(engine) == before
    assert sorted(t.id for t in node.refresh_tasks()) == sorted(CONFUSABLE_IDS)
    assert all(t.enabled for t in node.tasks)


def test_ids_and_keys_compare_byte_for_byte(node: Scheduler, engine: Engine) -> None:
    """MariaDB's PAD SPACE collation took ``'abc '`` for ``'abc'``."""
    node.register(task("abc"))
    node.register(task("abc "))  # another task, not a duplicate
    with pytest.raises(TaskNotFoundError):
        node.unregister("abc  ")
    assert [t.id for t in node.refresh_tasks()] == ["abc", "abc "]
    plain = node.trigger("abc", idempotency_key="k")
    spaced_key = node.trigger("abc", idempotency_key="k ")
    assert spaced_key.occurrence_id != plain.occurrence_id and spaced_key.status == "success"
    spaced_task = node.trigger("abc ")
    assert spaced_task.status == "success" and spaced_task.task_id == "abc "
    node.unregister("abc ")
    assert [t.id for t in node.refresh_tasks()] == ["abc"]
    assert row_counts(engine)["slots"] == 1


def test_a_single_row_write_that_matches_several_rows_rolls_back(node: Scheduler, engine: Engine) -> None:
    node.register(task("a"))
    node.register(task("b"))
    before = row_counts(engine)
    with pytest.raises(DatabaseError, match="matched 2 rows"):
        write(engine, lambda conn: one_row(conn.execute(delete(tasks).where(tasks.c.id.in_(["a", "b"])))))
    assert row_counts(engine) == before


@pytest.mark.parametrize("bad", ["x\ud800", "a\x00b"], ids=["surrogate", "nul"])
def test_nul_and_unpaired_surrogates_are_refused_by_field(node: Scheduler, engine: Engine, bad: str) -> None:
    node.register(task("t"))
    before = row_counts(engine)
    refused(lambda: node.register(task(bad)), "id")
    refused(lambda: node.register(task("u", name=bad)), "name")
    refused(lambda: node.register(task("u", description=bad)), "description")
    refused(lambda: node.register(task("u", params={"k": bad})), "params.k")
    refused(lambda: node.register(task("u", params={bad: 1})), "params")
    refused(lambda: node.trigger("t", source=bad), "source")
    refused(lambda: node.trigger("t", idempotency_key=bad), "idempotency_key")
    refused(lambda: node.trigger(bad), "task_id")
    refused(lambda: node.update_task("t", name=bad), "name")
    refused(lambda: SchedulerConfig(node_id=bad), "node_id")
    assert row_counts(engine) == before


def test_deep_params_huge_numbers_and_bad_steps_are_refused(node: Scheduler, engine: Engine) -> None:
    nested: dict[str, Any] = {}
    deepest = nested
    for _ in range(1_000):
        deepest["k"] = {}
        deepest = deepest["k"]
    before = row_counts(engine)
    with pytest.raises(ConfigError, match="nested more than"):
        node.register(task("deep", params=nested))
    refused(lambda: node.register(task("big", params={"n": 2**70})), "params.n")
    refused(lambda: node.register(task("nan", params={"n": float("nan")})), "params.n")
    refused(lambda: node.register(task("r", retry={"max_attempts": 2**70})), "retry.max_attempts")
    refused(lambda: node.register(task("r", retry={"max_attempts": 2, "backoff_ms": list(range(101))})),
            "retry.backoff_ms")
    with pytest.raises(InvalidCronError, match="step /61"):
        node.register(task("steps", cron="0-59/61 * * * *"))
    assert row_counts(engine) == before


@pytest.fixture
def reach(engine: Engine) -> Iterator[Reach]:
    service = Reach(engine, {"providers": [{"name": "log", "type": "console"}],
                             "templates": [{"name": "configured", "provider": "log", "body": "Hi {name}"}]})
    service.init()
    yield service
    service.close()


def test_stored_templates_get_the_checks_of_configured_ones(reach: Reach, engine: Engine) -> None:
    before = row_counts(engine)
    save = reach.templates.save
    refused(lambda: save("long", "log", "x" * 70_000), "body", ReachConfigError)
    refused(lambda: save("subject", "log", "body", subject="Hi\r\nBcc: all@example.com"), "subject", ReachConfigError)
    refused(lambda: save("two\nlines", "log", "body"), "name", ReachConfigError)
    refused(lambda: save("configured", "log", "body"), "name", ReachConfigError)
    refused(lambda: save("nul", "log", "a\x00b"), "body", ReachConfigError)
    refused(lambda: save("surrogate", "log", "x\ud800"), "body", ReachConfigError)
    refused(lambda: save(5, "log", "body"), "name", ReachConfigError)  # type: ignore[arg-type]
    refused(lambda: reach.templates.delete(5), "name", ReachConfigError)  # type: ignore[arg-type]
    assert row_counts(engine) == before


def test_message_values_are_refused_before_anything_is_sent(reach: Reach, engine: Engine) -> None:
    before = row_counts(engine)
    send = reach.send
    refused(lambda: send({"template": "configured", "to": "x", "vars": {"name": float("nan")}}), "vars.name",
            ReachConfigError)
    refused(lambda: send({"template": "configured", "to": "x", "vars": {"name": "a\x00"}}), "vars.name",
            ReachConfigError)
    refused(lambda: send({"provider": "log", "to": "x\ud800", "body": "b"}), "to", ReachConfigError)
    refused(lambda: send({"provider": "log", "to": "x", "body": "b", "subject": "a\nb"}), "subject",
            ReachConfigError)
    refused(lambda: reach.queue.get(5), "queue_id", ReachConfigError)  # type: ignore[arg-type]
    refused(lambda: reach.queue.list("dead", limit=True), "limit", ReachConfigError)
    with pytest.raises(ReachError):
        reach.queue.requeue_dead("7d4e1d9a-2f43-4a8e-9d1b-9a6a1c2b3d4e", 2**70)
    assert row_counts(engine) == before


# --- nodes starting at the same instant -----------------------------------------------------


def _fresh_url(kind: str, tmp_path: Any, round_: int) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/start-{round_}.db"
    return create_database(kind)


@pytest.mark.slow
@pytest.mark.parametrize("kind", BACKENDS)
def test_nodes_declaring_the_same_tasks_at_the_same_instant_all_start(kind: str, tmp_path: Any) -> None:
    """Three processes, three rounds, each on a fresh database: every ``init()`` succeeds (it
    failed with "already exists" in 1 to 3 starts out of 9 when the check-then-insert raced)."""
    if kind != "sqlite":
        server(kind)
    failures = []
    for round_ in range(3):
        url = _fresh_url(kind, tmp_path, round_)
        try:
            start_at = f"{time.time() + 3:.3f}"
            processes = [spawn_helper("declare_process.py", url, start_at, "20") for _ in range(3)]
            for process in processes:
                out, err = process.communicate(timeout=120)
                assert process.returncode == 0, err[-2000:]
                if '"ok": true' not in out:
                    failures.append(out.strip())
            engine = create_engine(url)
            try:
                assert row_counts(engine)["tasks"] == 20 and row_counts(engine)["slots"] == 20
            finally:
                close_engine(engine)
        finally:
            if kind != "sqlite":
                drop_database(kind, url)
    assert failures == []
