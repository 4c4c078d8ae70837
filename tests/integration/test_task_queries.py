"""The task pages' queries and operator API on every database: search, last outcomes,
history pages, delete with a compare-and-set, and masked secrets through an edit form."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import insert, select
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, TaskDefinition
from scheduler_core.db.tables import executions, tasks
from scheduler_core.errors import ConfigError, ConflictError, InvalidCronError, TaskNotFoundError
from scheduler_core.masking import MASK, restore_masked
from scheduler_core.runtime.task_operations import parse_search
from scheduler_core.store.task_queries import TaskFilter, TaskQueries

MakeScheduler = Callable[..., Scheduler]
PYTHON_CODE = "def run(context):\n    return 1\n"


def _catalogue(scheduler: Scheduler) -> None:
    """Six tasks of every kind, zone and state; each hook task ran with a known last outcome."""
    add = scheduler.register
    add(TaskDefinition(id="alpha", name="Nightly billing", cron="0 2 * * *", timezone="Europe/Berlin",
                       description="Charges the cards"))
    add(TaskDefinition(id="beta", name="Hourly sync", cron="0 * * * *", handler={"kind": "hook"}))
    add(TaskDefinition(id="gamma", name="Report 50%", cron="*/5 * * * *", enabled=False,
                       handler={"kind": "api", "url": "http://127.0.0.1:9/x", "headers": {"Authorization": "t"}}))
    add(TaskDefinition(id="delta", name="Nightly cleanup", cron="0 3 * * *", timezone="Europe/Berlin",
                       handler={"kind": "python", "code": PYTHON_CODE}))
    add(TaskDefinition(id="epsilon", name="Weekly", cron="0 6 * * 1", timezone="America/New_York"))
    add(TaskDefinition(id="zeta", name="Never run", cron="0 4 * * *"))
    outcomes = {"alpha": ["success", "failed"], "beta": ["failed", "success"], "epsilon": ["success"]}
    for task_id, results in outcomes.items():
        for result in results:
            scheduler.set_hooks({"on_task_execute": _outcome(result)})
            assert scheduler.trigger(task_id).status == result


def _outcome(result: str) -> Callable[[Any], Any]:
    def run(event: Any) -> Any:
        if result == "failed":
            raise RuntimeError("boom")
        return "ok"

    return run


def _ids(scheduler: Scheduler, query: str, **page: Any) -> list[str]:
    return [row.id for row in scheduler.task_ops.search(query, **page).rows]


SEARCHES = [
    ("", ["alpha", "beta", "delta", "epsilon", "gamma", "zeta"]),
    ("nightly", ["alpha", "delta"]),
    ("NIGHTLY billing", ["alpha"]),
    ('"nightly billing"', ["alpha"]),
    ("cards", ["alpha"]),  # the description
    ("gam", ["gamma"]),  # the id
    ("50%", ["gamma"]),  # LIKE wildcards are literal
    ("_", []),
    ("status:failed", ["alpha"]),  # the LAST outcome: beta failed before it succeeded
    ("status:success", ["beta", "epsilon"]),
    ("status:never", ["delta", "gamma", "zeta"]),
    ("status:running", []),
    ("kind:hook", ["alpha", "beta", "epsilon", "zeta"]),  # no handler, or an explicit hook
    ("kind:api", ["gamma"]),
    ("kind:python", ["delta"]),
    ("enabled:false", ["gamma"]),
    ("enabled:yes kind:api", []),
    ("tz:Europe/Berlin", ["alpha", "delta"]),
    ("timezone:America/New_York", ["epsilon"]),
    ("tz:Europe/Berlin nightly status:never", ["delta"]),
    ("Status:FAILED Kind:HOOK", ["alpha"]),
]
BAD_SEARCHES = [
    ("owner:bob", "unknown search field 'owner'"),
    ("status:exploded", "status: must be one of"),
    ("enabled:maybe", "enabled: must be true or false"),
    ("tz:Mars/Olympus", "tz: 'Mars/Olympus' is not an IANA time zone"),
    ("kind:ftp", "kind: no handler kind 'ftp'"),
    ("status:failed status:success", "status: is given twice"),
    ('"open quote', "not closed"),
    ("a\x00b", "must not contain NUL"),
]


def test_search_terms(make_node: MakeScheduler) -> None:
    scheduler = make_node()
    _catalogue(scheduler)  # once per database: every search below reads the same catalogue
    found = {query: _ids(scheduler, query) for query, _ in SEARCHES}
    assert found == dict(SEARCHES)


def test_bad_search_names_the_term(make_node: MakeScheduler) -> None:
    scheduler = make_node()
    scheduler.register(TaskDefinition(id="alpha", name="A", cron="0 2 * * *"))
    for query, message in BAD_SEARCHES:
        with pytest.raises(ConfigError) as info:
            scheduler.task_ops.search(query)
        assert info.value.field == "q" and message in info.value.message, query


def test_rows_carry_last_outcome_and_next_run(make_node: MakeScheduler) -> None:
    scheduler = make_node()
    _catalogue(scheduler)
    page = scheduler.task_ops.search("")
    rows = {row.id: row for row in page.rows}
    assert rows["alpha"].last is not None and rows["alpha"].last.status == "failed"
    assert rows["beta"].last is not None and rows["beta"].last.status == "success"
    assert rows["zeta"].last is None
    assert rows["gamma"].next_run_ms is None  # disabled
    alpha_next = rows["alpha"].next_run_ms
    assert alpha_next is not None and alpha_next > page.now_ms and alpha_next - page.now_ms <= 25 * 3_600_000
    assert rows["delta"].task is not None and rows["delta"].task.handler_kind == "python"


def test_keyset_pages_forward_and_back(make_node: MakeScheduler) -> None:
    scheduler = make_node()
    for number in range(7):
        scheduler.register(TaskDefinition(id=f"t{number}", name=f"Task {number}", cron="0 2 * * *"))
    ops = scheduler.task_ops
    first = ops.search("", limit=3)
    assert [r.id for r in first.rows] == ["t0", "t1", "t2"] and first.prev_before is None
    second = ops.search("", limit=3, after=first.next_after)
    assert [r.id for r in second.rows] == ["t3", "t4", "t5"] and second.prev_before == "t3"
    third = ops.search("", limit=3, after=second.next_after)
    assert [r.id for r in third.rows] == ["t6"] and third.next_after is None
    back = ops.search("", limit=3, before=third.prev_before)
    assert [r.id for r in back.rows] == ["t3", "t4", "t5"] and back.next_after == "t5"
    assert [r.id for r in ops.search("", limit=3, before=back.prev_before).rows] == ["t0", "t1", "t2"]
    assert ops.search("", limit=3, before="t1").prev_before is None
    with pytest.raises(ConfigError) as info:
        ops.search("", limit=101)
    assert info.value.field == "limit"


def test_last_execution_is_the_newest_row_even_with_equal_times(make_node: MakeScheduler, engine: Engine) -> None:
    scheduler = make_node()
    scheduler.register(TaskDefinition(id="tie", name="Tie", cron="0 2 * * *"))
    rows = [_journal_row("tie", occurrence, status, created_at=5_000)
            for occurrence, status in (("occ-a", "success"), ("occ-c", "failed"), ("occ-b", "skipped"))]
    rows.append(_journal_row("tie", "occ-z", "success", created_at=4_999))
    with engine.begin() as conn:
        conn.execute(insert(executions), rows)
    last = TaskQueries(engine).last_executions(["tie", "missing"])
    assert list(last) == ["tie"] and last["tie"].occurrence_id == "occ-c"  # (5000, occ-c) is the greatest
    assert TaskQueries(engine).last_executions([]) == {}
    assert [s.id for s in TaskQueries(engine).search(TaskFilter(status="failed"), 10)] == ["tie"]


def _journal_row(task_id: str, occurrence: str, status: str, created_at: int) -> dict[str, Any]:
    return {"occurrence_id": occurrence, "task_id": task_id, "task_revision": 1, "trigger": "manual",
            "status": status, "sequence": 1, "attempt": 0, "max_attempts": 1, "attempts": [],
            "created_at": created_at, "updated_at": created_at}


def test_occurrence_pages_newest_first(make_node: MakeScheduler, engine: Engine) -> None:
    scheduler = make_node()
    scheduler.register(TaskDefinition(id="report", name="Report", cron="0 2 * * *"))
    scheduler.register(TaskDefinition(id="other", name="Other", cron="0 2 * * *"))
    made = [(f"occ-{n:02d}", 1_000 + n // 2) for n in range(9)]  # pairs share a created_at
    with engine.begin() as conn:
        conn.execute(insert(executions), [_journal_row("report", o, "success", c) for o, c in made]
                     + [_journal_row("other", "occ-other", "running", 9_999)])
    expected = [o for o, _ in sorted(made, key=lambda m: (m[1], m[0]), reverse=True)]
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        page = scheduler.task_ops.occurrences("report", limit=4, before=cursor)
        seen.extend(row.occurrence_id for row in page.rows)
        assert not page.any_running
        cursor = page.next_before
        if cursor is None:
            break
    assert seen == expected
    assert scheduler.task_ops.occurrences("other").any_running
    for bad in ("nonsense", "12", ".occ", "x.occ", "12.o\x00cc"):
        with pytest.raises(ConfigError) as info:
            scheduler.task_ops.occurrences("report", before=bad)
        assert info.value.field == "before"


def test_running_occurrence_is_reported(make_node: MakeScheduler) -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(event: Any) -> Any:
        entered.set()
        release.wait(10)
        return "ok"

    scheduler = make_node(hooks={"on_task_execute": slow})
    scheduler.register(TaskDefinition(id="slow", name="Slow", cron="0 2 * * *"))
    occurrence = scheduler.submit("slow")
    try:
        assert entered.wait(10)
        page = scheduler.task_ops.occurrences("slow")
        assert page.any_running and page.rows[0].occurrence_id == occurrence
        assert _ids(scheduler, "status:running") == ["slow"]
    finally:
        release.set()


def test_delete_is_a_compare_and_set(make_node: MakeScheduler, engine: Engine) -> None:
    scheduler = make_node()
    stored = scheduler.register(TaskDefinition(id="report", name="Report", cron="0 2 * * *"))
    changed = scheduler.update_task("report", name="Renamed")
    with pytest.raises(ConflictError):
        scheduler.task_ops.delete("report", stored.updated_at)
    with pytest.raises(ConfigError):
        scheduler.task_ops.delete("report", None)
    assert scheduler.task_ops.get("report").name == "Renamed"
    deleted = scheduler.task_ops.delete("report", changed.updated_at)
    assert deleted.name == "Renamed" and scheduler.tasks == ()
    with engine.connect() as conn:
        assert list(conn.execute(select(tasks))) == []
        conn.rollback()
    with pytest.raises(TaskNotFoundError):
        scheduler.task_ops.delete("report", changed.updated_at)


def test_preview_and_next_runs(make_node: MakeScheduler) -> None:
    scheduler = make_node()
    preview = scheduler.task_ops.preview("  30 2 * * 1-5 ", "Europe/Berlin")
    assert (preview.cron, preview.timezone, preview.description) == (
        "30 2 * * 1-5", "Europe/Berlin", "At 02:30, Monday through Friday")
    assert len(preview.runs) == 5 and preview.runs == sorted(preview.runs)
    with pytest.raises(InvalidCronError):
        scheduler.task_ops.preview("61 * * * *", "UTC")
    with pytest.raises(ConfigError) as info:
        scheduler.task_ops.preview("* * * * *", "Mars/Olympus")
    assert info.value.field == "timezone"
    task = scheduler.register(TaskDefinition(id="off", name="Off", cron="* * * * *", enabled=False))
    assert scheduler.task_ops.next_runs(task) == []
    now = scheduler.task_ops.now_ms()
    hour = now - now % 3_600_000 + 3_600_000  # the next full hour: its minute 0 is excluded
    calendar = {"active_until_ms": hour + 4 * 3_600_000, "exclude": ["0 * * * *"]}
    task = scheduler.register(TaskDefinition(id="calendar", name="Calendar", cron="*/30 * * * *", calendar=calendar))
    after = scheduler.task_ops.now_ms()
    half_hours = range(after - after % 1_800_000 + 1_800_000, hour + 4 * 3_600_000, 1_800_000)
    expected = [minute for minute in half_hours if minute % 3_600_000][:5]  # the :30s until the window ends
    assert scheduler.task_ops.next_runs(task) == expected
    assert scheduler.task_ops.search("calendar").rows[0].next_run_ms == expected[0]


# --- pure helpers (no database) -------------------------------------------------------------


def test_parse_search() -> None:
    assert parse_search('status:failed kind:api enabled:false tz:Europe/Berlin nightly "big job"') == TaskFilter(
        words=("nightly", "big job"), status="failed", kind="api", enabled=False, timezone="Europe/Berlin")
    assert parse_search("  ") == TaskFilter()
    assert parse_search('tz:"UTC"') == TaskFilter(timezone="UTC")
    with pytest.raises(ConfigError):
        parse_search("x" * 501)


def test_restore_masked_keeps_stored_secrets() -> None:
    stored = {"kind": "api", "url": "https://bot:hunter2@api.example/run",
              "headers": {"Authorization": "Bearer s3cr3t", "Accept": "application/json"},
              "body": {"api_key": "k-123", "items": [{"token": "t-1"}]}}
    submitted = {"kind": "api", "url": "https://bot:***@api.example/run",
                 "headers": {"authorization": MASK, "Accept": "text/plain"},
                 "body": {"api_key": MASK, "items": [{"token": MASK}]}}
    assert restore_masked(submitted, stored, "handler") == {
        "kind": "api", "url": "https://bot:hunter2@api.example/run",
        "headers": {"authorization": "Bearer s3cr3t", "Accept": "text/plain"},
        "body": {"api_key": "k-123", "items": [{"token": "t-1"}]}}
    changed = {**submitted, "headers": {"Authorization": "Bearer new"}}
    assert restore_masked(changed, stored, "handler")["headers"] == {"Authorization": "Bearer new"}


@pytest.mark.parametrize(
    ("submitted", "field"),
    [
        ({"headers": {"X-Api-Key": MASK}}, "handler.headers.X-Api-Key"),
        ({"url": "https://bot:***@other.example/"}, "handler.url"),
        ({"body": {"items": [{"password": MASK}]}}, "handler.body.items[0].password"),
    ],
)
def test_restore_masked_refuses_a_mask_with_nothing_stored(submitted: dict[str, Any], field: str) -> None:
    stored = {"url": "https://bot:hunter2@api.example/run", "headers": {}, "body": {"items": []}}
    with pytest.raises(ConfigError) as info:
        restore_masked(submitted, stored, "handler")
    assert info.value.field == field
