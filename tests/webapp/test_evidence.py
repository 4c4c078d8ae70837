"""Evidence for every decision: the unknown review shows what happened (task link, error,
duration, HTTP status or exit code, a bounded and masked log excerpt) and resolves a filtered
set in bulk after a preview count; the journal links tasks and executions and shows errors and
durations; a blocked task points at the execution holding its slot."""

from __future__ import annotations

import re
import uuid
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.engine import Engine
from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from scheduler_core.db.tables import executions
from scheduler_core.model import Attempt
from scheduler_core.reach import Reach
from scheduler_core.store import ClaimRequest, ExecutionRepository
from scheduler_core.store.executions import FinishRequest
from scheduler_core.store.reach_queue import QueueRepository
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.helpers.http_server import RecordingServer
from tests.helpers.journal import db_now, execution_row, insert_rows, slot_holder
from tests.webapp.conftest import CONSOLE_REACH, Auth, csrf_token
from webapp.evidence import EXCERPT_CHARS, exit_evidence
from webapp.node import accounts_of, audit_of, scheduler_of

HOSTILE = '<script>alert("x")</script>'


def journal_unknown(engine: Engine, task_id: str, error: str, result: Any = None, took_ms: int = 4_200,
                    reason: str = "handler_unknown") -> str:
    """An unknown execution as a node leaves it: one attempt that ended ambiguously (its log
    projected), the task's slot kept."""
    ghost = ExecutionRepository(engine, "ghost", 60_000)
    token, occurrence = str(uuid.uuid4()), str(uuid.uuid4())
    (claimed,) = ghost.claim([ClaimRequest(occurrence, task_id, 1, "manual", 1, token)])
    assert claimed.outcome == "claimed", claimed
    attempt = Attempt(log_id=str(uuid.uuid4()), attempt=1, sequence=1, node_id="ghost", started_at=1_000_000)
    assert ghost.begin_attempt(occurrence, token, [attempt])
    execution = ghost.get(occurrence)
    assert execution is not None
    done = Attempt(attempt.log_id, 1, 1, "ghost", 1_000_000, 1_000_000 + took_ms, "unknown", error, result)
    committed = ghost.finish_many([FinishRequest(execution, token, "unknown", reason, (done,), False)]).committed
    assert occurrence in committed
    return occurrence


def _register(app: Flask, *ids: str) -> None:
    for task_id in ids:
        scheduler_of(app).register(TaskDefinition(id=task_id, name=task_id.title(), cron="0 2 * * *"))


def test_exit_evidence_reads_what_the_executors_write() -> None:
    assert exit_evidence("HTTP 500 Internal Server Error") == "HTTP 500"
    assert exit_evidence("connection lost ...\nHTTP 502 Bad Gateway") == "HTTP 502"
    assert exit_evidence("the process exited with code 3 before run() returned a result") == "exit code 3"
    assert exit_evidence("the process was killed by SIGKILL before run() returned a result") == "killed by SIGKILL"
    assert exit_evidence("request not sent: ConnectionRefusedError") is None and exit_evidence(None) is None


def test_an_unknown_card_shows_the_evidence(app: Flask, client: FlaskClient, auth: Auth) -> None:
    _register(app, "charge")
    noise = "x" * (EXCERPT_CHARS * 3)
    error = (f"HTTP 500 Internal Server Error {HOSTILE}\nretrying https://bob:hunter2pass@pay.example/charge\n"
             f"token=abc123secret {noise}")
    occurrence = journal_unknown(app.extensions["hai_engine"], "charge", error, {"api_key": "sk-live-1", "ok": False})
    auth.login()
    page = client.get("/executions/unknown").get_data(as_text=True)
    card = page[page.index(f'id="card-{occurrence}"'):]
    assert '<a href="/tasks/view/charge">charge</a>' in card  # the task, a link
    assert f'href="/executions/view/{occurrence}"' in card
    assert "HTTP 500" in card and "4.2 s" in card  # the status and the duration
    assert "Internal Server Error" in card  # the error
    assert HOSTILE not in page
    assert "&lt;script&gt;alert(" in page  # shown, escaped
    assert "hunter2pass" not in page and "abc123secret" not in page and "sk-live-1" not in page  # masked
    assert re.search(r"… \d{4} more characters", card)  # the log is an excerpt ...
    assert noise not in page
    log_link = re.search(r'href="(/logs/entry/[0-9a-f-]+)">The attempt\'s whole log', card)
    assert log_link and client.get(log_link.group(1)).status_code == 200  # ... with the whole log a click away


def test_an_http_500_from_a_real_server_is_on_the_card(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = scheduler_of(app)
    with RecordingServer() as server:  # a non-idempotent call answered 500: may have had its effect
        scheduler.register(TaskDefinition(id="webhook", name="Webhook", cron="0 2 * * *",
                                          handler={"kind": "api", "url": server.url("/status/500"), "method": "POST"}))
        log = scheduler.trigger("webhook")
    assert log.status == "unknown", log
    auth.login()
    page = client.get("/executions/unknown").get_data(as_text=True)
    assert log.occurrence_id in page and "HTTP 500" in page
    journal = client.get("/executions/?task=webhook").get_data(as_text=True)
    assert "<strong>HTTP 500</strong> HTTP 500 Internal Server Error" in journal  # the error column
    assert f'href="/executions/view/{log.occurrence_id}"' in journal and 'href="/tasks/view/webhook"' in journal
    detail = client.get(f"/executions/view/{log.occurrence_id}")
    assert detail.status_code == 200 and "HTTP 500" in detail.get_data(as_text=True)
    assert client.get("/executions/view/no-such-occurrence").status_code == 404


def test_the_journal_shows_error_and_duration(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = scheduler_of(app)
    scheduler.set_hooks({"on_task_execute": lambda event: (_ for _ in ()).throw(RuntimeError(HOSTILE))})
    _register(app, "breaks")
    failed = scheduler.trigger("breaks")
    assert failed.status == "failed"
    auth.login()
    page = client.get("/executions/").get_data(as_text=True)
    row = page[page.index(f"/executions/view/{failed.occurrence_id}") - 2_000:]
    assert "RuntimeError" in row and "&lt;script&gt;alert(" in page and HOSTILE not in page
    assert re.search(r'class="num">\d+ ms</td>', page)  # the duration column


def _bulk(client: FlaskClient, **form: Any) -> Any:
    return client.post("/executions/unknown/bulk", data={"csrf_token": csrf_token(client, "/executions/unknown"),
                                                          **form})


def _preview(client: FlaskClient, query: str) -> dict[str, str]:
    """The preview's form; DB time moves on first, past the second a preview leaves to commits in flight."""
    engine = client.application.extensions["hai_engine"]
    set_clock_offset(engine, clock_offset(engine) + 1_500)
    page = client.get(f"/executions/unknown/bulk?{query}").get_data(as_text=True)
    fields = dict(re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', page))
    fields.pop("csrf_token", None)
    count = re.search(r'id="bulk-count">(\d+)<', page)
    fields["shown"] = count.group(1) if count else "0"
    return fields


def test_bulk_resolve_settles_exactly_the_previewed_set(app: Flask, client: FlaskClient, auth: Auth) -> None:
    engine = app.extensions["hai_engine"]
    _register(app, "sync-a", "sync-b", "other")
    a = journal_unknown(engine, "sync-a", "lease expired", reason="lease_expired")
    b = journal_unknown(engine, "sync-b", "lease expired", reason="lease_expired")
    other = journal_unknown(engine, "other", "HTTP 500", reason="handler_unknown")
    auth.login()
    preview = _preview(client, "cause=lease_expired")
    assert preview["shown"] == "2" and preview["count"] == "2" and preview["cause"] == "lease_expired"
    # One of the two is resolved by someone else between the preview and the confirmation.
    single = scheduler_of(app).execution.get(a)
    scheduler_of(app).execution.resolve_unknown(a, "success", single.updated_at, "colleague", "checked it")
    late = journal_unknown(engine, "sync-a", "lease expired", reason="lease_expired")  # after the preview
    missing = _bulk(client, **{k: v for k, v in preview.items() if k != "shown"}, reason=" ")
    assert missing.status_code == 400 and "A reason is required" in missing.get_data(as_text=True)
    done = _bulk(client, **{k: v for k, v in preview.items() if k != "shown"}, status="discarded",
                 reason="The sync target shows neither batch.")
    assert done.status_code == 303
    flashed = client.get(done.headers["Location"]).get_data(as_text=True)
    assert "Resolved 1 of the 2 previewed" in flashed and "1 had changed since the preview" in flashed
    status = {occ: scheduler_of(app).execution.get(occ).status for occ in (a, b, other, late)}
    assert status == {a: "success", b: "discarded", other: "unknown", late: "unknown"}
    assert slot_holder(engine, "sync-b") is None  # the resolution freed the slot
    (entry,) = audit_of(app).list(None, "execution.bulk_resolve_unknown", 10, 0)
    assert entry.after["resolved"] == 1 and entry.after["occurrences"] == [b] and entry.before["previewed"] == 2
    assert entry.reason == "The sync target shows neither batch."


def test_bulk_resolve_refuses_a_bad_form_and_a_viewer(app: Flask, client: FlaskClient, auth: Auth) -> None:
    engine = app.extensions["hai_engine"]
    _register(app, "sync")
    occurrence = journal_unknown(engine, "sync", "lease expired")
    auth.login()
    preview = {k: v for k, v in _preview(client, "task=sync").items() if k != "shown"}
    for bad, field in (({"count": "abc"}, "count"), ({"bound_at": "9" * 40}, "bound_at"),
                       ({"count": "5000"}, "count"), ({"task": "\x00"}, "task"), ({"status": "maybe"}, "status")):
        answer = _bulk(client, **{**preview, "status": "success", "reason": "checked", **bad})
        assert answer.status_code == 400, bad
        assert field in answer.get_data(as_text=True), bad
    assert scheduler_of(app).execution.get(occurrence).status == "unknown"  # nothing changed
    accounts_of(app).create("watcher", "viewer", generate_password_hash("watcher-password"))
    viewer = app.test_client()
    Auth(viewer).login("watcher", "watcher-password")
    assert "Resolve all matching" not in viewer.get("/executions/unknown").get_data(as_text=True)
    refused = viewer.post("/executions/unknown/bulk", data={"csrf_token": csrf_token(viewer, "/executions/unknown"),
                                                            **preview, "status": "success", "reason": "x"})
    assert refused.status_code == 403 and scheduler_of(app).execution.get(occurrence).status == "unknown"


def test_a_blocked_task_links_to_the_execution_holding_its_slot(app: Flask, client: FlaskClient,
                                                                auth: Auth) -> None:
    _register(app, "stuck", "fine")
    occurrence = journal_unknown(app.extensions["hai_engine"], "stuck", "HTTP 503 Service Unavailable")
    auth.login()
    detail = client.get("/tasks/view/stuck").get_data(as_text=True)
    banner = detail[detail.index("state-banner-blocked"):]
    assert f'<a href="/executions/view/{occurrence}"><code>{occurrence}</code></a>' in banner[:800]
    listing = client.get("/tasks/").get_data(as_text=True)
    start = listing.index('href="/tasks/view/stuck"')
    stuck_row = listing[start:listing.index("</tr>", start)]
    assert "badge-state-blocked" in stuck_row and f"/executions/view/{occurrence}" in stuck_row
    assert client.get(f"/executions/view/{occurrence}").get_data(as_text=True).count("holds its task") == 1


def test_a_dead_letter_shows_its_real_cause(db_app: Flask) -> None:
    engine = db_app.extensions["hai_engine"]
    queue_id = str(uuid.uuid4())
    QueueRepository(engine, "test", 60_000).enqueue(queue_id, "log", None, "bad\x01recipient", "S", "secret body",
                                                    {}, (3, 1_000, 4_000), None)
    rounds = Reach(engine, CONSOLE_REACH, node_id="rounds", auto_migrate=False)
    rounds.init()
    try:
        rounds.run_round()
    finally:
        rounds.close()
    client = db_app.test_client()
    Auth(client).login()
    page = client.get("/notifications/dead").get_data(as_text=True)
    row = page[page.index(queue_id):]
    assert "invalid_message: invalid recipient" in row[:1_500] and "secret body" not in page


def test_the_overview_says_its_windows_and_lists_recent_failures(db_app: Flask) -> None:
    engine = db_app.extensions["hai_engine"]
    now = db_now(engine)
    old = [execution_row(f"old-{i}", now - 30 * 3_600_000 + i, "failed", "nightly") for i in range(3)]
    recent = [execution_row(f"new-{i}", now - 600_000 + i, status, "nightly")
              for i, status in enumerate(("failed", "success", "unknown", "interrupted"))]
    insert_rows(engine, executions, old + recent)
    client = db_app.test_client()
    Auth(client).login()
    page = client.get("/").get_data(as_text=True)
    assert "Executions by status, last 24 h" in page and "Recent failures, last 24 h" in page
    failed = re.search(r'href="/executions/\?status=failed">.*?<p class="figure">([^<]*)</p>'
                       r'<p class="muted small window">([^<]*)</p>', page, re.S)
    assert failed and failed.groups() == ("1", "last 24 h (4 all time)")  # the window, and all time beside it
    assert re.search(r'Unknown executions</h2>\s*<p class="figure">1</p><p class="muted small window">open now', page)
    listed = re.findall(r'href="/executions/view/([^"]+)"><code>', page[page.index("Recent failures"):])
    assert listed == ["new-3", "new-2", "new-0"]  # newest first, failures only, the window only


def test_a_bad_review_filter_names_its_field(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    for query, field in (("task=a%00b", "task"), ("cause=" + "x" * 65, "cause")):
        answer = client.get(f"/executions/unknown?{query}")
        assert answer.status_code == 400 and f"{field}: " in answer.get_data(as_text=True), query
        preview = client.get(f"/executions/unknown/bulk?{query}")
        assert preview.status_code == 400 and f"{field}: " in preview.get_data(as_text=True), query
