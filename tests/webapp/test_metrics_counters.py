"""The ``/metrics`` counters (``metric_totals``, scheduler_core/store/totals.py): each grows by exactly
the transitions committed, on every database; a rolled-back transition adds nothing; nothing goes
down when a task is deleted, the journal is pruned, time passes or more tasks come; the exposition
passes the strict OpenMetrics parser and ``promtool check metrics``."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from sqlalchemy import delete, event, func, select
from sqlalchemy.engine import Engine

from scheduler_core.db.tables import executions, logs, metric_totals
from scheduler_core.model import Attempt, Execution
from scheduler_core.runtime.metrics import Metrics
from scheduler_core.store.executions import BeginRequest, ClaimRequest, ExecutionRepository, FinishRequest
from scheduler_core.store.handoff import HandoffRepository, Missed
from scheduler_core.store.reach_queue import QueueRepository, Settlement
from scheduler_core.store.totals import Tally
from scheduler_core.store.transactions import write
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.helpers.journal import db_now, insert_rows, log_row
from tests.webapp.test_metrics import families, value

Series = dict[tuple[tuple[str, str], ...], float]


def scrape(engine: Engine) -> dict[str, Series]:
    return families(Metrics(engine).render().decode())


def counters(found: dict[str, Series]) -> Series:
    """Every sample of every counter and histogram family, keyed by family and labels."""
    kinds = ("hai_executions", "hai_lease_takeovers", "hai_missed_occurrences", "hai_notification_deliveries",
             "hai_fire_lateness_seconds")
    return {(("family", name), *labels): v for name in kinds for labels, v in found[name].items()}


def assert_never_lower(before: Series, after: Series) -> None:
    lower = {k: (v, after.get(k)) for k, v in before.items() if after.get(k, -1) < v}
    assert not lower, lower


def _claim(repo: ExecutionRepository, task_id: str, minute: int | None = None) -> tuple[Execution, str]:
    token, occurrence = str(uuid.uuid4()), str(uuid.uuid4())
    trigger = "cron" if minute is not None else "manual"
    (result,) = repo.claim([ClaimRequest(occurrence, task_id, 1, trigger, 1, token, scheduled_minute=minute)])
    assert result.outcome == "claimed", result
    execution = repo.get(occurrence)
    assert execution is not None
    return execution, token


def _attempt(started_at: int, sequence: int = 1, status: str | None = None) -> Attempt:
    return Attempt(log_id=str(uuid.uuid4()), attempt=1, sequence=sequence, node_id="n", started_at=started_at,
                   finished_at=None if status is None else started_at + 5, status=status)


def _finish(repo: ExecutionRepository, execution: Execution, token: str, status: str, started_at: int) -> None:
    assert repo.finish(execution, token, status, None, [_attempt(started_at, status=status)], release_slot=True)


def _expire(engine: Engine, repo: ExecutionRepository, task_id: str) -> Execution:
    """A running execution of ``task_id`` whose owner's lease ran out (its clock moved on)."""
    execution, _ = _claim(repo, task_id)
    set_clock_offset(engine, clock_offset(engine) + 2_000)  # the 1 s lease is over
    [expired] = [e for e in repo.expired() if e.occurrence_id == execution.occurrence_id]
    return expired


@pytest.fixture
def short_lease(engine: Engine) -> ExecutionRepository:
    return ExecutionRepository(engine, "node-a", 1_000)


def test_counters_grow_by_exactly_the_transitions_committed(engine: Engine, short_lease: ExecutionRepository) -> None:
    repo, now = short_lease, db_now(engine)
    minute = now - now % 60_000
    done, token = _claim(repo, "report", minute)  # a cron occurrence: its first attempt counts its lateness
    assert repo.begin_attempts([BeginRequest(done.occurrence_id, token, (_attempt(minute + 1_500),))])
    _finish(repo, done, token, "success", minute + 1_500)
    failed, token = _claim(repo, "flaky")
    _finish(repo, failed, token, "failed", now)
    holder, _ = _claim(repo, "busy")
    (skipped,) = repo.claim([ClaimRequest(str(uuid.uuid4()), "busy", 1, "manual", 1, str(uuid.uuid4()))])
    assert skipped.outcome == "skipped"
    taken = _expire(engine, repo, "idem")
    assert repo.take_over(taken, str(uuid.uuid4()))
    assert not repo.take_over(taken, str(uuid.uuid4()))  # lost: counts nothing
    lost = _expire(engine, repo, "billing")
    assert repo.mark_unknown(lost, "lease_lost", [_attempt(now)])
    unknown = repo.get(lost.occurrence_id)
    assert unknown is not None
    assert repo.resolve_unknown(unknown, "success", unknown.updated_at, "ops", "checked")
    assert not repo.resolve_unknown(unknown, "success", unknown.updated_at, "ops", "again")
    handoff = HandoffRepository(repo)
    gap = [Missed(ClaimRequest(f"missed-{minute}", "nightly", 1, "cron", 1, "", scheduled_minute=minute),
                  "no_node_running", until=minute + 240_000, count=5)]
    assert handoff.journal_missed(gap) == {f"missed-{minute}"}
    assert handoff.journal_missed(gap) == set()  # journaled already: counted once
    queue = QueueRepository(engine, "node-a", 60_000)
    for recipient in ("a", "b", "c"):
        queue.enqueue(str(uuid.uuid4()), "log", None, recipient, "s", "b", {}, (3, 1_000, 4_000), None)
    claimed = queue.claim_due(db_now(engine), "tok", 10)
    ids = sorted(m.entry.queue_id for m in claimed)
    assert queue.settle_many("tok", [Settlement(ids[0], "sent"), Settlement(ids[1], "dead"),
                                     Settlement(ids[2], "pending", retry_in_ms=1_000)]) == set(ids)

    found = scrape(engine)
    assert {labels: v for labels, v in found["hai_executions"].items()} == {
        (("__name__", "hai_executions_total"), ("status", s), ("task", t), ("team", "")): 1.0 for t, s in (
            ("report", "success"), ("flaky", "failed"), ("busy", "skipped"), ("billing", "unknown"),
            ("billing", "success"), ("nightly", "missed"))}
    # No task row was made for these ids: a task that is not (or no longer) defined has no team.
    assert found["hai_lease_takeovers"] == {(("__name__", "hai_lease_takeovers_total"), ("task", "idem"),
                                             ("team", "")): 1}
    assert found["hai_missed_occurrences"] == {
        (("__name__", "hai_missed_occurrences_total"), ("task", "nightly"), ("team", "")): 5}
    assert found["hai_notification_deliveries"] == {
        (("__name__", "hai_notification_deliveries_total"), ("outcome", o), ("provider", "log")): 1.0
        for o in ("sent", "dead")}
    lateness = "hai_fire_lateness_seconds"
    assert value(found, lateness, f"{lateness}_count") == 1
    assert value(found, lateness, f"{lateness}_sum") == pytest.approx(1.5)
    assert value(found, lateness, f"{lateness}_bucket", le="1.0") == 0
    assert value(found, lateness, f"{lateness}_bucket", le="2.5") == 1
    assert holder.status == "running"


def _lateness_totals(engine: Engine) -> tuple[int, int]:
    """(occurrences, summed ms) of the fire lateness counted so far."""
    t = metric_totals.c
    with engine.connect() as conn:
        rows = conn.execute(select(t.label, t.value).where(t.metric == "lateness")).all()
    return sum(int(v) for label, v in rows if label != "sum"), sum(int(v) for label, v in rows if label == "sum")


def test_each_cron_occurrence_counts_its_lateness_once_when_its_first_ownership_ends(
        engine: Engine, short_lease: ExecutionRepository) -> None:
    """The first attempt's fire lateness is counted with the transition that ends the first
    owner's ownership -- its terminal commit, a takeover, the expiry to ``unknown`` -- and by no
    other: not the begin (on the path of every start), not a later owner's terminal commit, not an
    operator's verdict, not a refused commit; nothing for a run that never began, or a manual one."""
    repo, now = short_lease, db_now(engine)
    minute = now - now % 60_000

    def begun(task_id: str, late_ms: int, trigger_minute: int | None = minute) -> tuple[Execution, str, Attempt]:
        execution, token = _claim(repo, task_id, trigger_minute)
        attempt = _attempt((trigger_minute or minute) + late_ms)
        assert repo.begin_attempts([BeginRequest(execution.occurrence_id, token, (attempt,))])
        return execution, token, attempt

    finished, finished_token, _ = begun("finished", 300)
    taken, taken_token, taken_attempt = begun("taken", 600)
    lost, _, lost_attempt = begun("lost", 900)
    never, _ = _claim(repo, "never", minute)
    manual, manual_token, _ = begun("manual", 50, trigger_minute=None)
    assert _lateness_totals(engine) == (0, 0)  # begun, running: nothing counted yet

    _finish(repo, finished, finished_token, "success", minute + 300)
    _finish(repo, manual, manual_token, "success", minute + 50)
    assert _lateness_totals(engine) == (1, 300)

    set_clock_offset(engine, clock_offset(engine) + 2_000)  # the 1 s leases are over
    expired = {e.task_id: e for e in repo.expired()}
    assert set(expired) >= {"taken", "lost", "never"}
    new_token = str(uuid.uuid4())
    assert repo.take_over(expired["taken"], new_token)
    assert not repo.take_over(expired["taken"], str(uuid.uuid4()))  # lost the race: counts nothing
    assert not repo.finish(taken, taken_token, "success", None, [taken_attempt], release_slot=True)  # refused
    assert _lateness_totals(engine) == (2, 900)
    second = replace(expired["taken"], sequence=2, execution_token=new_token)
    again = Attempt(log_id=str(uuid.uuid4()), attempt=2, sequence=2, node_id="n", started_at=db_now(engine))
    assert repo.begin_attempts([BeginRequest(second.occurrence_id, new_token, (taken_attempt, again))])
    assert repo.finish(second, new_token, "success", None,
                       [replace(taken_attempt, status="unknown"), replace(again, status="success")], release_slot=True)
    assert _lateness_totals(engine) == (2, 900)  # the second owner's end counts nothing

    assert repo.mark_unknown(expired["lost"], "lease_expired", [replace(lost_attempt, status="unknown")])
    assert repo.mark_interrupted(expired["never"], "owner_lost_before_start", [])
    assert _lateness_totals(engine) == (3, 1_800)
    unknown = repo.get(lost.occurrence_id)
    assert unknown is not None and unknown.status == "unknown"
    assert repo.resolve_unknown(unknown, "success", unknown.updated_at, "ops", "checked")
    assert _lateness_totals(engine) == (3, 1_800)
    assert never.status == "running"
    lateness = "hai_fire_lateness_seconds"
    found = scrape(engine)
    assert value(found, lateness, f"{lateness}_bucket", le="0.5") == 1  # 300 ms; 600 and 900 ms above
    assert value(found, lateness, f"{lateness}_bucket", le="1.0") == 3


def test_a_rolled_back_terminal_commit_counts_nothing(engine: Engine, short_lease: ExecutionRepository) -> None:
    """A terminal commit whose log projection fails is rolled back whole and made again without
    it: the rolled-back attempt adds nothing, the one committed adds one."""
    repo = short_lease
    execution, token = _claim(repo, "report")
    attempt = _attempt(db_now(engine), status="success")
    insert_rows(engine, logs, [log_row(attempt.log_id, 1_000)])  # the projection's insert will collide
    result = repo.finish_many([FinishRequest(execution, token, "success", None, (attempt,), True)])
    assert result.committed == {execution.occurrence_id} and result.projection_error
    assert value(scrape(engine), "hai_executions", "hai_executions_total", task="report", status="success") == 1

    def doomed(conn: Any) -> None:
        Tally().execution("report", "success").write(conn)
        raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        write(engine, doomed)
    assert value(scrape(engine), "hai_executions", "hai_executions_total", task="report", status="success") == 1


def test_deleting_tasks_and_journal_rows_takes_nothing_from_a_counter(engine: Engine,
                                                                     short_lease: ExecutionRepository) -> None:
    execution, token = _claim(short_lease, "gone")
    _finish(short_lease, execution, token, "success", db_now(engine))
    before = counters(scrape(engine))
    with engine.begin() as conn:  # what task deletion and journal retention leave behind
        conn.execute(delete(executions))
    after = counters(scrape(engine))
    assert after == before
    assert after[(("family", "hai_executions"), ("__name__", "hai_executions_total"), ("status", "success"),
                  ("task", "gone"), ("team", ""))] == 1


def test_the_lateness_histogram_only_grows_as_time_passes(engine: Engine, short_lease: ExecutionRepository) -> None:
    repo, now = short_lease, db_now(engine)
    minute = now - now % 60_000
    execution, token = _claim(repo, "report", minute)
    assert repo.begin_attempts([BeginRequest(execution.occurrence_id, token, (_attempt(minute + 700),))])
    _finish(repo, execution, token, "success", minute + 700)
    insert_rows(engine, logs, [log_row(str(uuid.uuid4()), minute + 700) | {
        "occurrence_id": execution.occurrence_id, "task_id": "report", "trigger": "cron"}])
    first = scrape(engine)
    assert value(first, "hai_fire_lateness_last_hour_occurrences", within_seconds="1.0") == 1
    set_clock_offset(engine, clock_offset(engine) + 2 * 3_600_000)  # two hours later
    later = scrape(engine)
    assert value(later, "hai_fire_lateness_last_hour_occurrences", within_seconds="1.0") == 0  # the window moved
    assert_never_lower(counters(first), counters(later))
    assert value(later, "hai_fire_lateness_seconds", "hai_fire_lateness_seconds_bucket", le="1.0") == 1


def test_the_first_tasks_counted_keep_their_series_and_other_never_shrinks(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """With two series: a and b counted first keep theirs; c, counted later, is ``_other`` however
    busy it becomes (the busiest-two rule would move it out of ``_other``, which would go down)."""
    monkeypatch.setattr("scheduler_core.runtime.metrics.MAX_TASK_SERIES", 2)
    seen: list[Series] = []
    for task_id, count in (("a", 1), ("b", 1), ("c", 1), ("c", 5), ("d", 1), ("a", 1)):
        write(engine, lambda conn, t=task_id, n=count: Tally().execution(t, "success", n).write(conn))
        seen.append(counters(scrape(engine)))
    for before, after in itertools.pairwise(seen):
        assert_never_lower(before, after)
    final = {dict(labels[2:])["task"]: v for labels, v in seen[-1].items() if labels[0][1] == "hai_executions"}
    assert final == {"a": 2, "b": 1, "_other": 7}


def test_one_statement_per_commit_with_rows_in_key_order(engine: Engine) -> None:
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "metric_totals" in statement:
            statements.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        tally = Tally()
        for task_id in ("z", "a", "m"):
            tally.execution(task_id, "success").execution(task_id, "failed").lateness(task_id, 300)
        write(engine, tally.write)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert len(statements) == 1
    with engine.connect() as conn:
        rows = conn.execute(select(func.count()).select_from(metric_totals)).scalar_one()
    assert rows == 3 * 4  # per task: two statuses, a lateness bucket, its sum (no row every count of a task locks)
    keys = sorted(tally.counts)
    assert list(tally.counts) != keys and keys == sorted(keys)


def test_the_upsert_is_compiled_once_whatever_the_tally_holds(engine: Engine) -> None:
    """A terminal batch counts each occurrence's status and lateness under its task: a tally of
    hundreds of rows, every batch. Its SQL must not depend on the rows, on any database, or the
    engine compiles it again each time -- half of a node's busy time in a burst before
    (bench/PROFILE.md, when the begin batch counted the lateness)."""
    texts: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "metric_totals" in statement:
            texts.append(statement)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        for size in (2, 40):
            tally = Tally()
            for i in range(size):
                tally.lateness(f"compiled-{i:03d}", 120 + i)
            write(engine, tally.write)
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert len(texts) == 2
    assert texts[0] == texts[1]
    with engine.connect() as conn:
        total = conn.execute(select(func.sum(metric_totals.c.value)).where(
            metric_totals.c.scope.like("compiled-%"), metric_totals.c.label == "250")).scalar_one()
        created = conn.execute(select(func.min(metric_totals.c.created_at)).where(
            metric_totals.c.scope.like("compiled-%"))).scalar_one()
    assert total == 42 and created > 0  # every row counted once, stamped with the database's time


# --- exposition ----------------------------------------------------------------------------


@pytest.fixture
def populated(engine: Engine, short_lease: ExecutionRepository) -> Iterator[Engine]:
    test_counters_grow_by_exactly_the_transitions_committed(engine, short_lease)
    yield engine


def test_the_exposition_passes_the_strict_openmetrics_parser(populated: Engine) -> None:
    metrics = Metrics(populated)
    parsed = {f.name: f for f in openmetrics_families(openmetrics_latest(metrics.registry()).decode())}
    assert parsed["hai_executions"].type == "counter"
    assert parsed["hai_fire_lateness_seconds"].type == "histogram"
    assert parsed["hai_fire_lateness_last_hour_occurrences"].type == "gauge"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (apt-get install prometheus)")
def test_promtool_finds_nothing_to_lint(populated: Engine, tmp_path: Path) -> None:
    body = Metrics(populated).render()
    checked = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60)
    assert checked.returncode == 0 and not checked.stdout.strip() and not checked.stderr.strip(), (
        checked.stdout.decode(), checked.stderr.decode())


def test_the_upsert_carries_any_task_id_exactly(engine: Engine) -> None:
    """The tally travels as a JSON document on PostgreSQL and MySQL: quotes, backslashes,
    non-ASCII and a task id of the column's full width come back as written, and add up."""
    ids = ['quote\'"-task', "back\\slash", "tâche-日本-✓", "w" * 128]
    for _ in range(2):
        tally = Tally()
        for i, task_id in enumerate(ids):
            tally.execution(task_id, "success", i + 1)
        write(engine, tally.write)
    t = metric_totals.c
    with engine.connect() as conn:
        found = dict(conn.execute(select(t.scope, t.value).where(t.metric == "executions", t.scope.in_(ids))).all())
    assert found == {task_id: 2 * (i + 1) for i, task_id in enumerate(ids)}
