"""Every public entry point driven with generated bad arguments, on every database.

For each entry point one argument is replaced by a generated value -- wrong types, None, NaN,
huge integers, NUL, unpaired surrogates, whitespace variants, long and deeply nested values --
and the call must either succeed or raise a coded error (``SchedulerError`` / ``ReachError``):
never a driver error or a bare Python exception. A refused call must leave every table's row
count as it was. The search is derandomized (hypothesis takes its seed from the test), so CI
runs the same bounded examples every time; ``HAI_INPUT_EXAMPLES`` runs a longer search.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.db import parse_database_config
from scheduler_core.db.tables import metadata
from scheduler_core.errors import DatabaseError, DbSaveFailedError, ReachError, SchedulerError
from scheduler_core.reach import Reach
from scheduler_core.runtime.accounts import Accounts, AuditTrail

EXAMPLES = int(os.environ.get("HAI_INPUT_EXAMPLES", "25"))
EXISTING = "existing-task"
QUEUE_ID = "7d4e1d9a-2f43-4a8e-9d1b-9a6a1c2b3d4e"

# Values nobody should be able to store, compare or send: each is a regression somewhere.
NASTY = st.sampled_from([
    None, True, False, 0, 1, -1, 5, 2**53, 2**63, 2**70, -(2**70), 10**5000, 1.0, -0.0, math.nan, math.inf,
    -math.inf, "", " ", "  ", "\t", "\n", "abc ", " abc", "x\ud800", "\udfff", "a\x00b", "\x00", "1", "01", "1.0",
    "ü", "\U0001d49c", "\u202e", "a" * 129, "a" * 70_000, b"bytes", bytearray(b"x"), [], [1], {}, {"k": "v"}, {1: 2},
    ("t",), {"a"}, object(), EXISTING + " ", EXISTING.upper(),
])


class Deep:
    """A value nested ``depth`` levels, built when used (hypothesis cannot print it)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth

    def build(self) -> Any:
        value: Any = "leaf"
        for _ in range(self.depth // 2):
            value = {"k": [value]}
        return value

    def __repr__(self) -> str:
        return f"Deep({self.depth})"


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                   max_size=3), max_leaves=10)
BAD = st.one_of(NASTY, st.text(max_size=40), st.text(alphabet=st.characters(codec="utf-8"), max_size=10),
                st.integers(), st.floats(), st.binary(max_size=10), JSONISH,
                st.integers(min_value=30, max_value=2_200).map(Deep))


def database_state(engine: Engine) -> list[list[str]]:
    """Every row of every table (the tables stay small here): what "changes nothing" is measured by."""
    with engine.connect() as conn:
        return [sorted(repr(tuple(row)) for row in conn.execute(select(table))) for table in metadata.sorted_tables]


def shown(value: Any) -> str:
    try:
        return repr(value)[:80]
    except Exception:  # too deep or too long to show
        return f"<{type(value).__name__}>"


def task(**fields: Any) -> TaskDefinition:
    return TaskDefinition(**{"id": "generated", "name": "Generated", "cron": "0 3 * * *", **fields})


Call = Callable[[Any], object]


def entry_points(node: Scheduler, reach: Reach, accounts: Accounts, audit: AuditTrail) -> dict[str, Call]:
    """Every public call, with one argument taken from the generator (``v``)."""
    ops, tasks, queue, templates = node.execution, node.task_ops, reach.queue, reach.templates
    return {
        "config.node_id": lambda v: SchedulerConfig(node_id=v),
        "config.lease_ms": lambda v: SchedulerConfig(lease_ms=v),
        "config.max_logs": lambda v: SchedulerConfig(max_logs=v),
        "db.database": lambda v: parse_database_config({"type": "sqlite", "database": v}),
        "db.url": lambda v: parse_database_config(v),
        "db.port": lambda v: parse_database_config({"type": "postgresql", "database": "d", "port": v}),
        "db.password": lambda v: parse_database_config({"type": "postgresql", "database": "d", "password": v}),
        "register.id": lambda v: node.register(task(id=v)),
        "register.name": lambda v: node.register(task(name=v)),
        "register.cron": lambda v: node.register(task(cron=v)),
        "register.timezone": lambda v: node.register(task(timezone=v)),
        "register.description": lambda v: node.register(task(description=v)),
        "register.enabled": lambda v: node.register(task(enabled=v)),
        "register.params": lambda v: node.register(task(params=v)),
        "register.params.value": lambda v: node.register(task(params={"k": v})),
        "register.retry": lambda v: node.register(task(retry=v)),
        "register.retry.max_attempts": lambda v: node.register(task(retry={"max_attempts": v})),
        "register.retry.backoff_ms": lambda v: node.register(task(retry={"max_attempts": 2, "backoff_ms": v})),
        "register.handler": lambda v: node.register(task(handler=v)),
        "register.handler.url": lambda v: node.register(task(handler={"kind": "api", "url": v})),
        "register.handler.timeout": lambda v: node.register(task(handler={"kind": "api", "url": "http://h/",
                                                                          "timeout": v})),
        "register.handler.headers": lambda v: node.register(task(handler={"kind": "api", "url": "http://h/",
                                                                          "headers": v})),
        "unregister": lambda v: node.unregister(v),
        "update_task.task_id": lambda v: node.update_task(v, enabled=False),
        "update_task.name": lambda v: node.update_task(EXISTING, name=v),
        "update_task.params": lambda v: node.update_task(EXISTING, params=v),
        "update_task.expected_updated_at": lambda v: node.update_task(EXISTING, expected_updated_at=v, name="n"),
        "trigger.task_id": lambda v: node.trigger(v),
        "submit.task_id": lambda v: node.submit(v),
        "get_logs.task_id": lambda v: node.get_logs(task_id=v),
        "get_logs.status": lambda v: node.get_logs(status=v),
        "get_logs.trigger_source": lambda v: node.get_logs(trigger_source=v),
        "get_logs.started_after": lambda v: node.get_logs(started_after=v),
        "get_logs.limit": lambda v: node.get_logs(limit=v),
        "get_logs.offset": lambda v: node.get_logs(offset=v),
        "execution.get": lambda v: ops.get(v),
        "execution.page.status": lambda v: ops.page(status=v),
        "execution.page.before": lambda v: ops.page(before=v),
        "execution.log_page.started_before": lambda v: ops.log_page(started_before=v),
        "execution.log": lambda v: ops.log(v),
        "execution.hourly": lambda v: ops.hourly(v),
        "execution.list_unknown": lambda v: ops.list_unknown(limit=v),
        "execution.resolve_unknown.id": lambda v: ops.resolve_unknown(v, "success", 1),
        "execution.resolve_unknown.status": lambda v: ops.resolve_unknown("occ", v, 1),
        "execution.resolve_unknown.version": lambda v: ops.resolve_unknown("occ", "success", v),
        "execution.resolve_unknown.reason": lambda v: ops.resolve_unknown("occ", "success", 1, "op", v),
        "execution.repair_log": lambda v: ops.repair_log(v),
        "execution.repair_all": lambda v: ops.repair_all(v),
        "task_ops.search.q": lambda v: tasks.search(v),
        "task_ops.search.after": lambda v: tasks.search(after=v),
        "task_ops.get": lambda v: tasks.get(v),
        "task_ops.occurrences.before": lambda v: tasks.occurrences(EXISTING, before=v),
        "task_ops.preview.cron": lambda v: tasks.preview(v, "UTC"),
        "task_ops.preview.timezone": lambda v: tasks.preview("* * * * *", v),
        "task_ops.delete.version": lambda v: tasks.delete(EXISTING, v),
        "reach.send": lambda v: reach.send(v),
        "reach.send.to": lambda v: reach.send({"provider": "log", "to": v, "body": "b"}),
        "reach.send.body": lambda v: reach.send({"provider": "log", "to": "x", "body": v}),
        "reach.send.subject": lambda v: reach.send({"provider": "log", "to": "x", "body": "b", "subject": v}),
        "reach.send.vars": lambda v: reach.send({"template": "hello", "to": "x", "vars": v}),
        "reach.send.var": lambda v: reach.send({"template": "hello", "to": "x", "vars": {"name": v}}),
        "reach.send.extra": lambda v: reach.send({"provider": "log", "to": "x", "body": "b", "extra": v}),
        "reach.send.template": lambda v: reach.send({"template": v, "to": "x"}),
        "queue.get": lambda v: queue.get(v),
        "queue.list.status": lambda v: queue.list(v),
        "queue.browse.provider": lambda v: queue.browse("dead", provider=v),
        "queue.browse.after": lambda v: queue.browse("dead", after=v),
        "queue.requeue_dead.id": lambda v: queue.requeue_dead(v, 1),
        "queue.requeue_dead.version": lambda v: queue.requeue_dead(QUEUE_ID, v),
        "queue.resolve_unknown.status": lambda v: queue.resolve_unknown(QUEUE_ID, v),
        "queue.resolve_unknown.message_id": lambda v: queue.resolve_unknown(QUEUE_ID, "sent", v),
        "queue.bulk_requeue": lambda v: queue.bulk_requeue(v),
        "templates.save.name": lambda v: templates.save(v, "log", "body"),
        "templates.save.provider": lambda v: templates.save("t", v, "body"),
        "templates.save.body": lambda v: templates.save("t", "log", v),
        "templates.save.subject": lambda v: templates.save("t", "log", "body", v),
        "templates.update.version": lambda v: templates.update("t", "log", "body", None, v),
        "templates.delete": lambda v: templates.delete(v),
        "templates.preview": lambda v: templates.preview("hello", v),
        "accounts.get": lambda v: accounts.get(v),
        "accounts.create.name": lambda v: accounts.create(v, "viewer", "hash"),
        "accounts.create.role": lambda v: accounts.create("someone", v, "hash"),
        "accounts.set_role.version": lambda v: accounts.set_role("someone", "admin", v),
        "accounts.page.after": lambda v: accounts.page(after=v),
        "audit.record.actor": lambda v: audit.record(v, "act", None),
        "audit.record.target": lambda v: audit.record("op", "act", v),
        "audit.record.after": lambda v: audit.record("op", "act", None, after=v),
        "audit.list.actor": lambda v: audit.list(actor=v),
    }


@pytest.fixture
def services(make_node: Callable[..., Scheduler], engine: Engine) -> Iterator[dict[str, Call]]:
    node = make_node(hooks={"on_task_execute": lambda event: None})
    node.register(TaskDefinition(id=EXISTING, name="Existing", cron="0 3 * * *"))
    reach = Reach(engine, {"providers": [{"name": "log", "type": "console"}],
                           "templates": [{"name": "hello", "provider": "log", "body": "Hi {name}"}]})
    reach.init()
    yield entry_points(node, reach, Accounts(engine), AuditTrail(engine))
    reach.close()


def test_every_entry_point_refuses_generated_input_with_a_coded_error(services: dict[str, Call],
                                                                    engine: Engine) -> None:
    names = sorted(services)
    tried: dict[str, int] = dict.fromkeys(names, 0)

    @settings(max_examples=EXAMPLES * len(names), deadline=None, derandomize=EXAMPLES == 25, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.sampled_from(names), BAD)
    def check(name: str, value: Any) -> None:
        tried[name] += 1
        before = database_state(engine)
        try:
            services[name](value.build() if isinstance(value, Deep) else value)
        except (SchedulerError, ReachError) as exc:
            assert exc.code, f"{name}({shown(value)}): an error without a code"
            # The database saw the value: a failed statement or save is a hole in the boundary.
            assert not isinstance(exc, DatabaseError | DbSaveFailedError), f"{name}({shown(value)}): {exc}"
            assert type(exc) is not SchedulerError, f"{name}({shown(value)}): generic {exc}"
            assert database_state(engine) == before, f"{name}({shown(value)}) was refused but changed rows"
        except Exception as exc:  # a driver or Python error escaped the boundary
            pytest.fail(f"{name}({shown(value)}) raised {type(exc).__name__}: {exc!s:.300}")

    check()
    assert min(tried.values()) >= EXAMPLES // 5, f"entry points the search barely tried: {tried}"


def test_the_generator_reaches_every_entry_point(services: dict[str, Call]) -> None:
    """Each entry point is called at least once with a value it must refuse (NUL)."""
    for name, call in sorted(services.items()):
        with pytest.raises((SchedulerError, ReachError)):
            call("a\x00b")
            pytest.fail(f"{name} accepted NUL")
