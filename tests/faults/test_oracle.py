"""The oracle itself, on hand-made journals: it must pass a correct run and catch each kind
of violation with a sentence that names it (a checker that never fails proves nothing)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.cron import cron_occurrence_id
from scheduler_core.db.tables import executions
from tests.helpers.fault_cluster import recording_hooks
from tests.helpers.oracle import (
    MINUTE_MS,
    Effect,
    Journal,
    TaskSpec,
    Window,
    append_event,
    check,
    check_database,
    read_effects,
    record_effect,
)

M0 = 1_800_000_000_000 - 1_800_000_000_000 % MINUTE_MS  # a minute start
NOW = M0 + 3 * MINUTE_MS
EVERY = TaskSpec("every", "* * * * *")
IDEM = TaskSpec("idem", "* * * * *", idempotent=True)
WINDOW = Window(M0, M0 + MINUTE_MS)


def attempt(number: int, node: str = "n1", sequence: int = 1, status: str | None = "success") -> dict[str, Any]:
    return {"log_id": "set by row()", "attempt": number, "sequence": sequence, "node_id": node,
            "started_at": M0, "finished_at": M0 + 1, "status": status, "error": None, "result": None}


def row(task: str, minute: int, status: str = "success", attempts: list[dict[str, Any]] | None = None,
        **changes: Any) -> dict[str, Any]:
    occurrence_id = changes.get("occurrence_id", cron_occurrence_id(task, minute))
    given = [attempt(1)] if attempts is None else attempts
    tried = [{**a, "log_id": f"{occurrence_id}/{a['attempt']}"} for a in given]
    base = {"occurrence_id": occurrence_id, "task_id": task, "trigger": "cron",
            "scheduled_minute": minute, "status": status, "reason": None, "sequence": 1, "attempt": len(tried),
            "max_attempts": 3 if task == "idem" else 1, "execution_token": f"tok-{task}-{minute}",
            "owner_node": "n1", "lease_until": None, "attempts": tried,
            "log_persistence": "persisted" if tried and status != "running" else None}
    return {**base, **changes}


def logs_of(*rows: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"id": a["log_id"], "occurrence_id": r["occurrence_id"], "status": a["status"], "attempt": a["attempt"]}
            for r in rows if r["log_persistence"] == "persisted" for a in r["attempts"]]


def effect(r: dict[str, Any], number: int = 1, node: str = "n1", sequence: int = 1) -> Effect:
    return Effect(r["task_id"], r["occurrence_id"], number, sequence, node, 4242)


def journal(rows: list[dict[str, Any]], slots: list[dict[str, Any]] | None = None,
            logs: list[dict[str, Any]] | None = None) -> Journal:
    return Journal(rows, slots or [], logs_of(*rows) if logs is None else logs, NOW)


def good_run() -> tuple[list[dict[str, Any]], list[Effect]]:
    rows = [row("every", M0), row("every", M0 + MINUTE_MS)]
    return rows, [effect(r) for r in rows]


def only(problems: list[str], *fragments: str) -> None:
    assert len(problems) == 1, problems
    for fragment in fragments:
        assert fragment in problems[0], problems


def test_a_correct_run_passes() -> None:
    rows, effects = good_run()
    assert check(journal(rows), WINDOW, [EVERY], effects) == []


def test_catches_a_missing_minute() -> None:
    rows, effects = good_run()
    only(check(journal(rows[:1]), WINDOW, [EVERY], effects[:1]), "missed: task every", str(M0 + MINUTE_MS))


def test_catches_a_row_for_a_minute_that_was_not_due() -> None:
    hourly = TaskSpec("hourly", "0 * * * *")
    odd = row("hourly", M0 + MINUTE_MS)
    problems = check(journal([odd]), WINDOW, [hourly], [effect(odd)])
    assert len(problems) == 2 and "missed: task hourly" in problems[0] and "extra: task hourly" in problems[1]
    assert M0 % 3_600_000 == 0  # so the first minute of the window was due: that one is missed
    only(check(journal([odd]), Window(M0 + MINUTE_MS, M0 + MINUTE_MS), [hourly], [effect(odd)]), "not due")


def test_catches_a_duplicate_occurrence_of_one_minute() -> None:
    rows, effects = good_run()
    twin = row("every", M0, occurrence_id="twin-of-the-first")
    problems = check(journal([*rows, twin]), WINDOW, [EVERY], [*effects, effect(twin)])
    assert any("extra: task every has 2 journal rows" in p for p in problems), problems
    assert any("twin-of-the-first is not the deterministic" in p for p in problems), problems


def test_catches_an_effect_without_a_journal_row() -> None:
    rows, effects = good_run()
    ghost = Effect("every", "no-such-occurrence", 1, 1, "n2", 99)
    only(check(journal(rows), WINDOW, [EVERY], [*effects, ghost]), "effect without a journal row", "node n2")


def test_catches_an_effect_of_an_attempt_the_journal_does_not_record() -> None:
    first = row("idem", M0)
    only(check(journal([first]), Window(M0, M0), [IDEM], [effect(first), effect(first, number=2)]),
         "effect without a journal attempt", "attempt 2")


def test_catches_a_double_effect_of_a_non_idempotent_task() -> None:
    rows, effects = good_run()
    rows[0] = row("every", M0, attempts=[attempt(1, status="failed"), attempt(2)])
    problems = check(journal(rows), WINDOW, [EVERY], [*effects, effect(rows[0], number=2)])
    only(problems, "double effect: task every is not idempotent", "ran 2 times")


def test_catches_one_attempt_that_ran_twice_even_when_idempotent() -> None:
    first = row("idem", M0)
    problems = check(journal([first]), Window(M0, M0), [IDEM], [effect(first), effect(first, node="n1")])
    only(problems, "double effect: attempt 1 of occurrence", "ran 2 times")


def test_accepts_two_effects_of_an_idempotent_takeover_the_journal_shows() -> None:
    taken = row("idem", M0, attempts=[attempt(1, "n1", 1, "unknown"), attempt(2, "n2", 2, "success")], sequence=2,
                owner_node="n2")
    effects = [effect(taken, 1, "n1", 1), effect(taken, 2, "n2", 2)]
    assert check(journal([taken]), Window(M0, M0), [IDEM], effects) == []


def test_catches_a_takeover_the_journal_does_not_show() -> None:
    hidden = row("idem", M0, attempts=[attempt(1, "n1", 1, "unknown"), attempt(2, "n2", 2, "success")])
    problems = check(journal([hidden]), Window(M0, M0), [IDEM], [effect(hidden, 1, "n1", 1),
                                                                 effect(hidden, 2, "n2", 2)])
    assert any("shows no takeover" in p for p in problems), problems
    assert any("beyond the row's 1" in p for p in problems), problems


def test_catches_a_success_whose_handler_left_no_effect() -> None:
    rows, effects = good_run()
    only(check(journal(rows), WINDOW, [EVERY], effects[1:]), "succeeded on node n1", "no effect")


def test_catches_a_slot_held_by_a_finished_execution() -> None:
    rows, effects = good_run()
    slot = {"task_id": "every", "occurrence_id": rows[0]["occurrence_id"], "execution_token": "tok"}
    only(check(journal(rows, [slot]), WINDOW, [EVERY], effects), "still held by occurrence", "is success")


def test_catches_two_owners_of_one_slot() -> None:
    a = row("every", M0, "running", [attempt(1, status=None)], lease_until=NOW + 10_000)
    b = row("every", M0 + MINUTE_MS, "running", [attempt(1, status=None)], lease_until=NOW + 10_000)
    slot = {"task_id": "every", "occurrence_id": a["occurrence_id"], "execution_token": a["execution_token"]}
    problems = check(journal([a, b], [slot]), WINDOW, [EVERY], [effect(a), effect(b)])
    assert any("2 executions holding its slot at once" in p for p in problems), problems
    assert any(f"occurrence {b['occurrence_id']} of task every is running but the slot is held by" in p
               for p in problems), problems


def test_catches_a_slot_token_of_another_owner() -> None:
    a = row("every", M0, "running", [attempt(1, status=None)], lease_until=NOW + 10_000)
    slot = {"task_id": "every", "occurrence_id": a["occurrence_id"], "execution_token": "someone-else"}
    only(check(journal([a], [slot]), Window(M0, M0), [EVERY], [effect(a)]), "two owners")


def test_catches_an_execution_stuck_running_after_recovery() -> None:
    stuck = row("every", M0, "running", [attempt(1, status=None)], lease_until=NOW - 1)
    slot = {"task_id": "every", "occurrence_id": stuck["occurrence_id"], "execution_token": stuck["execution_token"]}
    only(check(journal([stuck], [slot]), Window(M0, M0), [EVERY], [effect(stuck)]), "stuck running")
    assert check(journal([stuck], [slot]), Window(M0, M0), [EVERY], [effect(stuck)], settled=False) == []


def test_catches_unknown_without_a_begun_attempt_and_idempotent_unknown_with_budget() -> None:
    never = row("every", M0, "unknown", [])
    slot = {"task_id": "every", "occurrence_id": never["occurrence_id"], "execution_token": never["execution_token"]}
    only(check(journal([never], [slot]), Window(M0, M0), [EVERY], []), "no attempt began")
    early = row("idem", M0, "unknown", [attempt(1, status="unknown")], reason="lease_expired")
    slot = {"task_id": "idem", "occurrence_id": early["occurrence_id"], "execution_token": early["execution_token"]}
    only(check(journal([early], [slot]), Window(M0, M0), [IDEM], [effect(early)]), "budget left")


def test_catches_a_skip_without_reason() -> None:
    skipped = row("every", M0, "skipped", [])
    only(check(journal([skipped]), Window(M0, M0), [EVERY], []), "skipped without a reason")


def test_fire_lateness_counted_once_for_each_ended_first_ownership() -> None:
    rows = [row("every", M0), row("every", M0 + MINUTE_MS, attempts=[{**attempt(1), "started_at": M0 + 61_500}]),
            row("every", M0 + 2 * MINUTE_MS, "running", [attempt(1, status=None)], lease_until=NOW + 5_000),
            row("idem", M0, "running", [attempt(1, status="unknown"), attempt(2, "n2", 2, None)], sequence=2,
                lease_until=NOW + 5_000)]
    held = [{"task_id": r["task_id"], "occurrence_id": r["occurrence_id"], "execution_token": r["execution_token"]}
            for r in rows[2:]]

    def judged(counted: dict[str, tuple[int, int]]) -> list[str]:
        return check(replace(journal(rows, held), lateness=counted), None, [EVERY, replace(IDEM, tracked=False)],
                     [effect(r) for r in rows[:2]], settled=False)

    assert judged({"every": (2, 1_500), "idem": (1, 0)}) == []  # the running first owner: not yet
    only(judged({"every": (3, 1_500), "idem": (1, 0)}), "task every", "(3, 1500)", "(2, 1500)")
    only(judged({"every": (2, 1_500)}), "task idem", "(0, 0)", "(1, 0)")  # a takeover ended it
    only(judged({"every": (2, 0), "idem": (1, 0)}), "fire-lateness")


def test_log_projection_rules() -> None:
    rows, effects = good_run()
    rows[1] = replace_value(rows[1], log_persistence="pending")
    assert check(journal(rows), WINDOW, [EVERY], effects) == []
    only(check(journal(rows), WINDOW, [EVERY], effects, projected=True), "still has logs pending")
    rows[1] = replace_value(rows[1], log_persistence=None)
    only(check(journal(rows), WINDOW, [EVERY], effects), "neither persisted nor pending")
    complete = logs_of(*good_run()[0])
    only(check(journal(good_run()[0], logs=complete[:1]), WINDOW, [EVERY], effects), "is missing")
    stray = {"id": "stray", "occurrence_id": "x", "status": "success", "attempt": 1}
    only(check(journal(good_run()[0], logs=[*complete, stray]), WINDOW, [EVERY], effects), "log row stray")


def replace_value(r: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**r, **changes}


def test_effects_file_survives_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    record_effect(path, Effect("t", "o", 1, 1, "n", 1))
    append_event(path, {"kind": "ready", "node": "n", "pid": 1})
    with open(path, "a") as out:
        out.write('{"kind": "effect", "task_')  # a writer killed mid-line
    assert read_effects(path) == [Effect("t", "o", 1, 1, "n", 1)]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_on_a_real_journal(engine: Engine, tmp_path: Path) -> None:
    """A real run passes; deleting its journal row leaves its effect without a row."""
    events = tmp_path / "events.jsonl"
    node = Scheduler(engine, SchedulerConfig(node_id="n1"), hooks=recording_hooks(events, "n1"))
    node.init()
    try:
        node.register(TaskDefinition(id="manual", name="Manual", cron="0 0 1 1 *"))
        log = node.trigger("manual")
    finally:
        node.close()
    spec = TaskSpec("manual", "0 0 1 1 *")
    assert check_database(engine, None, [spec], read_effects(events)) == []
    with engine.begin() as conn:
        conn.execute(delete(executions).where(executions.c.occurrence_id == log.occurrence_id))
    problems = check_database(engine, None, [spec], read_effects(events))
    assert any("effect without a journal row" in p for p in problems), problems
    assert any("has no journal attempt" in p for p in problems), problems  # its log row is orphaned now
    assert replace(read_effects(events)[0], pid=0).node == "n1"
