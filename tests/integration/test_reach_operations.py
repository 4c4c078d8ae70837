"""The dashboard's queue and template operations on every database: filtered keyset lists,
do-not-disturb hold times, exact bulk requeue, resolve with a version, versioned templates."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy.engine import Engine

from scheduler_core.errors import ReachConfigError, ReachError, TemplateNotFoundError
from scheduler_core.reach import Reach
from scheduler_core.reach.queue import SETTLE_GRACE_MS, BulkPreview
from scheduler_core.store.reach_queue import QueueRepository
from scheduler_core.store.reach_queue_pages import QueueFilter
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.helpers.http_server import RecordingServer


@pytest.fixture
def receiver() -> Iterator[RecordingServer]:
    server = RecordingServer()
    yield server
    server.close()


def _config(receiver: RecordingServer, dnd: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"providers": [
        {"name": "hook", "type": "api", "url": receiver.url("/status/400"), "idempotent": True},  # dead at once
        {"name": "flaky", "type": "api", "url": receiver.url("/status/503")},  # started, not idempotent: unknown
        {"name": "log", "type": "console"},
    ], "templates": [{"name": "otp", "provider": "log", "subject": "Code {code}", "body": "{code} for {minutes} min"}],
        "dnd": dnd or {}, "queue": {"max_attempts": 3, "retry_delay_ms": 1_000, "max_retry_delay_ms": 4_000}}


@pytest.fixture
def reach(engine: Engine, receiver: RecordingServer) -> Iterator[Reach]:
    made = Reach(engine, _config(receiver), node_id="ops-node")
    made.init()
    yield made
    made.close()


def _enqueue(engine: Engine, provider: str, template: str | None = None, recipient: str = "user-1",
             not_before: int | None = None) -> str:
    queue_id = str(uuid.uuid4())
    QueueRepository(engine, "test", 60_000).enqueue(queue_id, provider, template, recipient, None, "body", {},
                                                    (3, 1_000, 4_000), not_before)
    return queue_id


def _dead(reach: Reach, engine: Engine, count: int, provider: str = "hook", template: str | None = None) -> list[str]:
    """``count`` dead letters made by a real round: 400 from an idempotent webhook is permanent;
    a console message with an unprintable recipient is invalid."""
    recipient = "bad\x01recipient" if provider == "log" else "user-1"
    ids = [_enqueue(engine, provider, template, recipient) for _ in range(count)]
    reach.run_round()
    for queue_id in ids:
        entry = reach.queue.get(queue_id)
        assert entry is not None and entry.status == "dead", entry
    return ids


def test_browse_filters_and_pages_by_key(reach: Reach, engine: Engine) -> None:
    hooked = _dead(reach, engine, 5, template="otp")
    logged = _dead(reach, engine, 1, provider="log")
    everything = reach.queue.browse("dead", limit=100)
    assert {row.entry.queue_id for row in everything.rows} == {*hooked, *logged} and everything.next_after is None
    by_class = reach.queue.browse("dead", failure="invalid_message")
    assert [row.entry.queue_id for row in by_class.rows] == logged
    assert {r.entry.queue_id for r in reach.queue.browse("dead", provider="hook", template="otp").rows} == set(hooked)
    assert reach.queue.browse("dead", template="other").rows == []
    seen: list[str] = []
    after = None
    while True:  # pages of two, newest change first, no row twice, none left out
        page = reach.queue.browse("dead", provider="hook", limit=2, after=after)
        seen += [row.entry.queue_id for row in page.rows]
        keys = [(row.entry.updated_at, row.entry.queue_id) for row in page.rows]
        assert keys == sorted(keys, reverse=True)
        if page.next_after is None:
            break
        after = page.next_after
    assert sorted(seen) == sorted(hooked) and len(seen) == len(set(seen))


def test_counts_with_a_cap(reach: Reach, engine: Engine) -> None:
    _dead(reach, engine, 3)
    assert reach.queue.counts(cap=2)["dead"] == 3  # "more than 2"
    assert reach.queue.counts(cap=10)["dead"] == 3 and reach.queue.counts()["dead"] == 3


def _window_around_now(zone: str) -> dict[str, Any]:
    local = datetime.now(UTC).astimezone(ZoneInfo(zone))
    start, end = local - timedelta(hours=1), local + timedelta(hours=1)
    return {"enabled": True, "strategy": "delay", "timezone": zone, "start": start.strftime("%H:%M"),
            "end": end.strftime("%H:%M")}


def test_held_until_the_window_ends(engine: Engine, receiver: RecordingServer) -> None:
    window = _window_around_now("Europe/Berlin")
    held_reach = Reach(engine, _config(receiver, dnd=window), node_id="held")
    held_reach.init()
    try:
        result = held_reach.send({"template": "otp", "to": "user-1", "vars": {"code": "1", "minutes": 5}})
        assert result.deferred and result.queue_id
        page = held_reach.queue.browse("pending")
        [row] = page.rows
        assert row.held_until is not None and row.held_until == row.entry.next_attempt_at
        shown = datetime.fromtimestamp(row.held_until / 1000, UTC).astimezone(ZoneInfo("Europe/Berlin"))
        assert shown.strftime("%H:%M") == window["end"]
        due_now = _enqueue(engine, "hook")  # due at once, but rounds do not run inside the window
        [entry] = [r for r in held_reach.queue.browse("pending").rows if r.entry.queue_id == due_now]
        assert entry.held_until == row.held_until
        assert held_reach.queue.held_until(entry.entry, page.now_ms) == row.held_until
    finally:
        held_reach.close()
    plain = Reach(engine, _config(receiver), node_id="plain")  # no window: a message due now is not held
    plain.init()
    try:
        [entry] = [r for r in plain.queue.browse("pending").rows if r.entry.queue_id == due_now]
        assert entry.held_until is None
    finally:
        plain.close()


def test_bulk_requeue_takes_exactly_the_previewed_set(reach: Reach, engine: Engine) -> None:
    previewed_ids = _dead(reach, engine, 4)
    other_provider = _dead(reach, engine, 1, provider="log")
    set_clock_offset(engine, clock_offset(engine) + SETTLE_GRACE_MS + 500)  # the rows are past the grace
    preview = reach.queue.preview_bulk_requeue(provider="hook")
    assert (preview.count, preview.more, preview.bound_id) == (4, False, None)
    changed = previewed_ids[0]
    entry = reach.queue.get(changed)
    assert entry is not None
    reach.queue.requeue_dead(changed, entry.updated_at)  # someone requeues one meanwhile ...
    died_later = _dead(reach, engine, 1)  # ... and a new one dies (the round also kills `changed` again)
    result = reach.queue.bulk_requeue(preview)
    assert (result.previewed, result.requeued, result.changed) == (4, 3, 1)
    for queue_id in previewed_ids[1:]:
        requeued = reach.queue.get(queue_id)
        assert requeued is not None and (requeued.status, requeued.attempt_count) == ("pending", 0)
    for queue_id in [changed, *died_later, *other_provider]:
        still = reach.queue.get(queue_id)
        assert still is not None and still.status == "dead", queue_id
    again = reach.queue.bulk_requeue(preview)  # confirming twice changes nothing more
    assert (again.requeued, again.changed) == (0, 4)


def test_bulk_preview_of_a_large_set_takes_the_oldest(reach: Reach, engine: Engine) -> None:
    ids = _dead(reach, engine, 5)
    set_clock_offset(engine, clock_offset(engine) + SETTLE_GRACE_MS + 500)
    repo = QueueRepository(engine, "test", 60_000)
    captured = repo.capture_dead(QueueFilter("dead", provider="hook"), repo.now() - SETTLE_GRACE_MS, 3)
    assert (captured.count, captured.more) == (3, True) and captured.bound_id is not None
    oldest = sorted((e.updated_at, e.queue_id) for e in (reach.queue.get(i) for i in ids) if e is not None)[:3]
    assert (captured.bound_at, captured.bound_id) == oldest[-1]
    result = reach.queue.bulk_requeue(BulkPreview("hook", None, None, captured.bound_at, captured.bound_id, 3))
    assert (result.requeued, result.changed) == (3, 0)
    statuses = {queue_id: reach.queue.get(queue_id).status for queue_id in ids}  # type: ignore[union-attr]
    assert sorted(statuses.values()) == ["dead", "dead", "pending", "pending", "pending"]
    assert all(statuses[queue_id] == "pending" for _, queue_id in oldest)


def test_rows_inside_the_grace_are_left_for_the_next_preview(reach: Reach, engine: Engine) -> None:
    _dead(reach, engine, 2)
    assert reach.queue.preview_bulk_requeue().count == 0  # they died less than the grace ago


def test_resolve_unknown_at_a_version(reach: Reach, engine: Engine) -> None:
    queue_id = _enqueue(engine, "flaky")
    reach.run_round()
    entry = reach.queue.get(queue_id)
    assert entry is not None and entry.status == "unknown"
    assert [row.entry.queue_id for row in reach.queue.browse("unknown").rows] == [queue_id]
    with pytest.raises(ReachError) as info:
        reach.queue.resolve_unknown(queue_id, "sent", "prov-1", "alice", expected_updated_at=entry.updated_at - 1)
    assert info.value.details["conflict"]
    resolved = reach.queue.resolve_unknown(queue_id, "sent", "prov-1", "alice", expected_updated_at=entry.updated_at)
    assert (resolved.status, resolved.message_id) == ("sent", "prov-1")


def test_stored_templates_are_versioned(reach: Reach) -> None:
    templates = reach.templates
    created = templates.create("welcome", "log", "Hello {name}", "Hi {name}")
    assert (created.provider, created.subject, created.body) == ("log", "Hi {name}", "Hello {name}")
    with pytest.raises(ReachConfigError) as taken:
        templates.create("welcome", "log", "again")
    assert taken.value.field == "name" and "already exists" in taken.value.message
    with pytest.raises(ReachConfigError) as configured:
        templates.create("otp", "log", "shadow")
    assert configured.value.field == "name" and "configured" in configured.value.message
    with pytest.raises(ReachError) as stale:
        templates.update("welcome", "log", "Hello again {name}", None, created.updated_at - 1)
    assert stale.value.details["conflict"]
    assert templates.stored_one("welcome").body == "Hello {name}"  # type: ignore[union-attr]
    updated = templates.update("welcome", "log", "Hello again {name}", None, created.updated_at)
    assert updated.body == "Hello again {name}" and updated.updated_at > created.updated_at
    with pytest.raises(ReachError):
        templates.delete("welcome", created.updated_at)  # the old version
    templates.delete("welcome", updated.updated_at)
    assert templates.stored_one("welcome") is None
    with pytest.raises(TemplateNotFoundError):
        templates.update("welcome", "log", "x", None, updated.updated_at)


def test_template_check_names_every_missing_variable(reach: Reach) -> None:
    checked = reach.templates.check("otp", {"code": "42"})
    assert (checked.variables, checked.missing, checked.body) == (["code", "minutes"], ["minutes"], None)
    rendered = reach.templates.check("otp", {"code": "42", "minutes": 5})
    assert (rendered.missing, rendered.subject, rendered.body) == ([], "Code 42", "42 for 5 min")


@pytest.mark.parametrize(("call", "field"), [
    (lambda r: r.queue.browse("lost"), "status"),
    (lambda r: r.queue.browse("dead", failure="tired"), "failure"),
    (lambda r: r.queue.browse("dead", provider=""), "provider"),
    (lambda r: r.queue.browse("dead", template="x" * 129), "template"),
    (lambda r: r.queue.browse("dead", limit=0), "limit"),
    (lambda r: r.queue.browse("dead", after="yesterday"), "after"),
    (lambda r: r.queue.browse("dead", after="12.not-a-uuid"), "after"),
    (lambda r: r.queue.counts(cap=0), "cap"),
    (lambda r: r.queue.preview_bulk_requeue(failure="tired"), "failure"),
    (lambda r: r.queue.bulk_requeue(BulkPreview(None, None, None, -1, None, 1)), "bound_at"),
    (lambda r: r.queue.bulk_requeue(BulkPreview(None, None, None, 1, "nope", 1)), "bound_id"),
    (lambda r: r.queue.bulk_requeue(BulkPreview(None, None, None, 1, None, 10_001)), "count"),
    (lambda r: r.queue.bulk_requeue({"count": 1}), "preview"),
    (lambda r: r.queue.resolve_unknown(str(uuid.uuid4()), "sent", expected_updated_at="v1"), "expected_updated_at"),
    (lambda r: r.templates.create("", "log", "b"), "name"),
    (lambda r: r.templates.create("n", "fax", "b"), "provider"),
    (lambda r: r.templates.create("n", "log", "b", "two\nlines"), "subject"),
    (lambda r: r.templates.create("n", "log", "  "), "body"),
    (lambda r: r.templates.update("n", "log", "b", None, "v1"), "expected_updated_at"),
])
def test_bad_arguments_name_the_field(reach: Reach, call: Any, field: str) -> None:
    with pytest.raises(ReachConfigError) as info:
        call(reach)
    assert info.value.field == field
    assert reach.templates.stored() == []
