"""``max_runs`` at the claim, on every database (docs/semantics.md S10): each scheduled run seated
counts; the seat that reaches the limit disables the task, marked and audited, in the claim's
transaction; a later claim of the spent task -- a node that had not seen the disable -- is
``skipped`` (``max_runs``); manual runs neither count nor are stopped; enabling the task starts a
new count; a task file applied again leaves a spent task disabled. The multi-process run is
tests/multinode/test_max_runs.py."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.cron import MINUTE_MS, cron_occurrence_id
from scheduler_core.db.tables import audit_log, executions, slots
from scheduler_core.runtime.task_apply import Change, apply_step, plan
from scheduler_core.runtime.task_files import read_task_file
from scheduler_core.store import ClaimOutcome, ClaimRequest, ExecutionRepository, TaskRepository

T0 = 1_800_000_000_000 - 1_800_000_000_000 % MINUTE_MS


def _claim(engine: Engine, task_id: str, minute: int, trigger: str = "cron", limited: bool = True) -> str:
    occurrence = cron_occurrence_id(task_id, T0 + minute * MINUTE_MS) if trigger == "cron" else str(uuid.uuid4())
    request = ClaimRequest(occurrence, task_id, 1, trigger, 1, str(uuid.uuid4()),
                           scheduled_minute=T0 + minute * MINUTE_MS if trigger == "cron" else None,
                           run_limited=limited)
    (result,) = ExecutionRepository(engine, "claimer", 60_000).claim([request])
    return result.outcome


def _free(engine: Engine, task_id: str) -> None:
    """The run holding the slot ended (its row left as it is: only the slot matters here)."""
    with engine.begin() as conn:
        conn.execute(update(slots).where(slots.c.task_id == task_id).values(occurrence_id=None, execution_token=None))


def _rows(engine: Engine, task_id: str) -> dict[int, tuple[str, str | None]]:
    with engine.connect() as conn:
        found = conn.execute(select(executions.c.scheduled_minute, executions.c.status, executions.c.reason)
                             .where(executions.c.task_id == task_id, executions.c.trigger == "cron")).all()
        conn.rollback()
    return {(int(m) - T0) // MINUTE_MS: (s, r) for m, s, r in found}


def _disables(engine: Engine, task_id: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        found = conn.execute(select(audit_log.c.actor, audit_log.c.reason, audit_log.c.before, audit_log.c.after)
                             .where(audit_log.c.action == "task.disable", audit_log.c.target == task_id)).all()
        conn.rollback()
    return [tuple(row) for row in found]


def test_the_seat_that_reaches_the_limit_disables_the_task(make_node: Any, engine: Engine) -> None:
    node = make_node()
    node.register(TaskDefinition(id="lim", name="lim", cron="* * * * *", max_runs=2))
    tasks = TaskRepository(engine)
    assert _claim(engine, "lim", 0) == ClaimOutcome.CLAIMED
    first = tasks.get("lim")
    assert first is not None and first.enabled and first.runs_counted == 1 and first.limit_reached_at is None
    assert _claim(engine, "lim", 0, trigger="manual") == ClaimOutcome.SKIPPED  # the slot: the cron run holds it
    _free(engine, "lim")
    assert _claim(engine, "lim", 1, trigger="manual") == ClaimOutcome.CLAIMED  # manual: not counted
    assert tasks.get("lim").runs_counted == 1  # type: ignore[union-attr]
    _free(engine, "lim")

    assert _claim(engine, "lim", 1) == ClaimOutcome.CLAIMED  # the second, the last
    spent = tasks.get("lim")
    assert spent is not None and not spent.enabled and spent.runs_counted == 2
    assert spent.limit_reached_at is not None and spent.revision == first.revision + 1
    assert _disables(engine, "lim") == [("scheduler", "reached max_runs: 2 scheduled runs started (last: "
                                         f"{cron_occurrence_id('lim', T0 + MINUTE_MS)})",
                                         {"enabled": True}, {"enabled": False, "max_runs": 2})]

    _free(engine, "lim")  # a node that has not seen the disable claims the next minute
    assert _claim(engine, "lim", 2) == ClaimOutcome.SKIPPED
    assert _rows(engine, "lim") == {0: ("running", None), 1: ("running", None), 2: ("skipped", "max_runs")}
    assert _claim(engine, "lim", 3, trigger="manual") == ClaimOutcome.CLAIMED  # a spent task still runs by hand
    assert tasks.get("lim").runs_counted == 2 and len(_disables(engine, "lim")) == 1  # type: ignore[union-attr]

    # Enabling it again starts a new count; an edit that leaves it disabled does not.
    _free(engine, "lim")
    renamed = node.update_task("lim", expected_updated_at=spent.updated_at, name="lim, renamed")
    assert not renamed.enabled and renamed.runs_counted == 2 and renamed.limit_reached_at is not None
    enabled = node.update_task("lim", expected_updated_at=renamed.updated_at, enabled=True)
    assert enabled.enabled and enabled.runs_counted == 0 and enabled.limit_reached_at is None
    assert _claim(engine, "lim", 4) == ClaimOutcome.CLAIMED
    assert tasks.get("lim").runs_counted == 1  # type: ignore[union-attr]


def test_a_claim_that_does_not_know_a_limit_reads_none(make_node: Any, engine: Engine) -> None:
    """A task without max_runs is neither counted nor locked (the claim reads no task row)."""
    node = make_node()
    node.register(TaskDefinition(id="free", name="free", cron="* * * * *"))
    for minute in range(3):
        assert _claim(engine, "free", minute) == ClaimOutcome.CLAIMED
        _free(engine, "free")
    stored = TaskRepository(engine).get("free")
    assert stored is not None and stored.enabled and stored.runs_counted == 0


def test_a_task_file_applied_again_grants_no_new_runs(make_node: Any, engine: Engine, tmp_path: Path) -> None:
    node = make_node()
    path = tmp_path / "tasks.yaml"

    def apply(max_runs: int) -> dict[str, Change]:
        path.write_text(f"tasks:\n  - id: once\n    name: once\n    cron: '* * * * *'\n    max_runs: {max_runs}\n")
        steps = plan(node, read_task_file(str(path), {}), "tasks.yaml", prune=False).steps
        for step in steps:
            if step.change != Change.UNCHANGED:
                apply_step(node, step, "tasks.yaml")
        return {step.task_id: step.change for step in steps}

    assert apply(1) == {"once": Change.CREATE}
    assert _claim(engine, "once", 0) == ClaimOutcome.CLAIMED  # its one run: it disables itself
    spent = TaskRepository(engine).get("once")
    assert spent is not None and not spent.enabled and spent.limit_reached_at is not None
    assert apply(1) == {"once": Change.UNCHANGED}  # the file says enabled (the default): no new run
    assert not TaskRepository(engine).get("once").enabled  # type: ignore[union-attr]
    assert apply(2) == {"once": Change.UPDATE}  # a new limit: enabled, a new count
    again = TaskRepository(engine).get("once")
    assert again is not None and again.enabled and again.runs_counted == 0 and again.max_runs == 2
