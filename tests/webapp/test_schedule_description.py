"""A task's schedule described (``Scheduler.describe``, ``GET /api/v1/schedules/{id}``, the task
page) matches the journal, on every database: its next fire times (calendar applied), its last 10
runs newest first with their duration, and the counts of what did not run -- missed minutes (a
summary row counts the minutes it stands for), skipped because a run was still going, dropped
because the buffer was full, waiting now -- and the pauses its failures caused."""

from __future__ import annotations

import uuid

from flask import Flask

from scheduler_core import TaskDefinition
from scheduler_core.cron import MINUTE_MS
from scheduler_core.cron.jitter import jitter_delay
from scheduler_core.model import Attempt
from scheduler_core.statuses import AttemptStatus, ExecutionStatus
from scheduler_core.store import ClaimRequest, ExecutionRepository
from scheduler_core.store.handoff import HandoffRepository
from scheduler_core.store.journal import Missed
from scheduler_core.store.users import AuditRepository
from tests.helpers.node_cluster import db_now, journal
from tests.webapp.api_support import make_api
from tests.webapp.conftest import Auth
from webapp.node import scheduler_of


def _claim(repo: ExecutionRepository, task_id: str, minute: int, limit: int) -> str:
    (result,) = repo.claim([ClaimRequest(str(uuid.uuid4()), task_id, 1, "cron", 1, str(uuid.uuid4()),
                                         scheduled_minute=minute, waiting_limit=limit)])
    return result.outcome


def test_describe_matches_the_journal(db_app: Flask) -> None:
    api = make_api(db_app)
    scheduler = scheduler_of(db_app)
    engine = api.engine
    now = db_now(engine)
    base = now - now % MINUTE_MS - 60 * MINUTE_MS
    task = scheduler.register(TaskDefinition(
        id="billing/hourly", name="Hourly billing", cron="0 * * * *", overlap={"policy": "buffer_one"},
        calendar={"exclude": ["0 12 * * *"]}))
    repo = ExecutionRepository(engine, "writer", 600_000)
    # one run that ended (with an attempt of 1.5 s), one running, one waiting, two dropped, a skip
    first = ClaimRequest(str(uuid.uuid4()), task.id, task.revision, "cron", 1, "t-first", scheduled_minute=base)
    repo.claim([first])
    attempt = Attempt(str(uuid.uuid4()), 1, 1, "writer", base + 2_000)
    assert repo.begin_attempt(first.occurrence_id, first.token, [attempt])
    execution = scheduler.execution.get(first.occurrence_id)
    started = execution.attempts[0].started_at
    ended = Attempt(attempt.log_id, 1, 1, "writer", started, started + 1_500, AttemptStatus.SUCCESS)
    repo.finish(execution, first.token, ExecutionStatus.SUCCESS, None, [ended], True)
    outcomes = [_claim(repo, task.id, base + m * MINUTE_MS, 1) for m in range(1, 6)]
    assert outcomes == ["claimed", "waiting", "skipped", "skipped", "skipped"]
    assert _claim(repo, task.id, base + 10 * MINUTE_MS, 0) == "skipped"  # a claim as the skip policy makes it
    HandoffRepository(repo).journal_missed([Missed(
        ClaimRequest(str(uuid.uuid4()), task.id, task.revision, "cron", 1, "t-missed",
                     scheduled_minute=base - 30 * MINUTE_MS), "no_node_running", base - 20 * MINUTE_MS, 11)])
    AuditRepository(engine).record("scheduler", "task.pause", task.id, reason="failed 2 times in a row (last: x)")

    rows = journal(engine, task_id=task.id)
    by = {(r.status, r.reason) for r in rows}
    assert ("queued", "buffered") in by and ("skipped", "buffer_full") in by and ("skipped", "slot_busy") in by

    described = scheduler.describe(task.id)
    want = {
        "missed": sum(r.missed_count or 1 for r in rows if r.status == "missed"),
        "skipped_by_overlap": sum(1 for r in rows if (r.status, r.reason) == ("skipped", "slot_busy")),
        "dropped_from_buffer": sum(1 for r in rows if (r.status, r.reason) == ("skipped", "buffer_full")),
        "waiting": sum(1 for r in rows if r.status == "queued"),
    }
    counts = described.counts
    assert {name: getattr(counts, name) for name in want} == want == {
        "missed": 11, "skipped_by_overlap": 1, "dropped_from_buffer": 3, "waiting": 1}
    assert counts.since_ms == min(int(r.created_at) for r in rows)
    assert described.paused_by_failure == 1
    assert described.next_fire_times == task.upcoming(db_now(engine), 10)
    assert all(ms % 3_600_000 == 0 for ms in described.next_fire_times)
    newest = sorted(rows, key=lambda r: (int(r.created_at), r.occurrence_id), reverse=True)[:10]
    assert [r.occurrence_id for r in described.last_runs] == [r.occurrence_id for r in newest]
    (done,) = [r for r in described.last_runs if r.occurrence_id == first.occurrence_id]
    assert (done.status, done.started_at, done.duration_ms) == ("success", started, 1_500)

    # The API says the same, to a viewer; an unknown task is a 404.
    answer = api.call("GET", f"/api/v1/schedules/{task.id}", "viewer")
    assert answer.status_code == 200, answer.get_data(as_text=True)
    body = answer.get_json()
    assert body["counts"] == {**want, "skipped_by_run_limit": 0, "paused_by_failure": 1, "since_ms": counts.since_ms}
    assert body["next_fire_times"] == described.next_fire_times
    assert [r["occurrence_id"] for r in body["last_runs"]] == [r.occurrence_id for r in described.last_runs]
    assert api.call("GET", "/api/v1/schedules/nope", "viewer").status_code == 404
    assert api.call("GET", f"/api/v1/schedules/{task.id}", None).status_code == 401

    # The task's page shows the counts.
    browser = db_app.test_client()
    Auth(browser).login()
    page = browser.get(f"/tasks/view/{task.id}").get_data(as_text=True)
    assert "error-page" not in page, page[page.find("error-page"):][:600]
    assert "Dropped: the buffer was full</dt><dd>3</dd>" in page and "Missed minutes</dt><dd>11</dd>" in page


def test_a_spent_run_limit_is_described_and_shown(db_app: Flask) -> None:
    """A task that disabled itself on reaching its max_runs: describe and the API give the count,
    none left and when; the page says why it is disabled and how to start a new count."""
    api = make_api(db_app)
    scheduler = scheduler_of(db_app)
    repo = ExecutionRepository(api.engine, "writer", 600_000)
    task = scheduler.register(TaskDefinition(id="twice", name="Twice", cron="* * * * *", max_runs=1,
                                             overlap={"policy": "buffer_one"}))
    now = db_now(api.engine)
    minutes = [now - now % MINUTE_MS + m * MINUTE_MS for m in (1, 2)]
    outcomes = [repo.claim([ClaimRequest(str(uuid.uuid4()), task.id, task.revision, "cron", 1, str(uuid.uuid4()),
                                         scheduled_minute=m, waiting_limit=1, run_limited=True)])[0].outcome
                for m in minutes]
    assert outcomes == ["claimed", "skipped"]  # the first disabled it: the next is spent, not buffered

    described = scheduler.describe(task.id)
    assert (described.runs_counted, described.runs_left, described.counts.skipped_by_run_limit) == (1, 0, 1)
    assert described.limit_reached_at is not None and described.next_fire_times == []
    body = api.call("GET", f"/api/v1/schedules/{task.id}", "viewer").get_json()
    assert (body["runs_counted"], body["runs_left"], body["limit_reached_at"]) == (1, 0, described.limit_reached_at)
    assert body["counts"]["skipped_by_run_limit"] == 1
    stored = api.call("GET", f"/api/v1/tasks/{task.id}", "viewer").get_json()
    assert (stored["enabled"], stored["max_runs"], stored["runs_counted"]) == (False, 1, 1)

    browser = db_app.test_client()
    Auth(browser).login()
    page = browser.get(f"/tasks/view/{task.id}").get_data(as_text=True)
    assert "Disabled by its run limit" in page and "Enabling it starts a new count" in page
    assert "Skipped: its run limit was spent</dt><dd>1</dd>" in page


def test_the_next_fire_times_are_delayed_by_the_jitter(db_app: Flask) -> None:
    scheduler = scheduler_of(db_app)
    task = scheduler.register(TaskDefinition(id="spread", name="Spread", cron="0 * * * *", jitter_ms=600_000))
    now = db_now(scheduler.engine)
    minutes = task.upcoming(now, 10)
    described = scheduler.describe(task.id)
    assert described.next_fire_times == [m + jitter_delay("spread", m, 600_000) for m in minutes]
    assert any(start != minute for start, minute in zip(described.next_fire_times, minutes, strict=True))
    browser = db_app.test_client()
    Auth(browser).login()
    page = browser.get("/tasks/view/spread").get_data(as_text=True)
    assert "each run starts up to 10 min after its minute" in page and page.count("later (jitter)") == 5
