"""A node's warm-up: the statements of a busy minute's starts (claim, begin, terminal commit and
its log projection) run once on a synthetic occurrence, in a transaction that is rolled back,
after the node's first answered tick -- so that its first busy minute does not build and compile them
(bench/RESULTS.md section 2) -- and nothing of it stays in the database, on every database."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.engine import Engine

from scheduler_core.db.tables import executions, logs, metric_totals, slots
from scheduler_core.store import ExecutionRepository
from scheduler_core.store.executions import WARM_CONNECTIONS, WARM_UP_TASK
from scheduler_core.store.transactions import read
from tests.helpers.fault_node import statement_kind
from tests.helpers.journal import wait_for_first_tick
from tests.integration.test_alerts import wait_until

TABLES = (executions, slots, logs, metric_totals)


@pytest.fixture
def kinds(engine: Engine) -> Iterator[Counter[str]]:
    """The journal statements the engine runs, by kind (tests/helpers/fault_node.py)."""
    seen: Counter[str] = Counter()

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        kind = statement_kind(statement)
        if kind is not None:
            seen[kind] += 1

    event.listen(engine, "before_cursor_execute", count)
    yield seen
    event.remove(engine, "before_cursor_execute", count)


def _rows(engine: Engine) -> dict[str, int]:
    return read(engine, lambda conn: {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                                      for t in TABLES})


def test_the_warm_up_runs_the_start_path_and_leaves_nothing(engine: Engine, kinds: Counter[str]) -> None:
    before = _rows(engine)
    repo = ExecutionRepository(engine, "warm", 60_000)
    asked: list[bool] = []
    repo.warm_up(lambda conn: asked.append(True))
    assert {"claim", "begin", "finish", "projection"} <= set(kinds), kinds
    connections = 1 if engine.dialect.name == "sqlite" else WARM_CONNECTIONS  # claims, begins, finishes
    assert asked == [True] * connections  # the claim's own follow-up read, in the same transaction
    assert _rows(engine) == before
    repo.warm_up()  # again: the same synthetic task, nothing left over to collide with
    assert _rows(engine) == before
    assert read(engine, lambda conn: conn.execute(select(func.count()).select_from(executions).where(
        executions.c.task_id.like(f"{WARM_UP_TASK}%"))).scalar_one()) == 0


def test_a_node_warms_up_after_its_first_tick(engine: Engine, make_node: Any, kinds: Counter[str]) -> None:
    """A node with no task claims nothing, yet its start ran the claim path once, after its first
    tick (answered: tests/integration/test_outage.py starts one without a database)."""
    before = _rows(engine)
    node = make_node()
    node.start()
    wait_for_first_tick(node)
    connections = 1 if engine.dialect.name == "sqlite" else WARM_CONNECTIONS
    wait_until(lambda: kinds["finish"] >= connections, "the warm-up")
    assert kinds["claim"] == kinds["begin"] == kinds["finish"] == connections, kinds
    assert _rows(engine) == before
