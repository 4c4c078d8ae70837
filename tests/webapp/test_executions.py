"""Executions pages: filters, the unknown review queue, and resolving with a CAS and a reason."""

from __future__ import annotations

import html
import re
import threading
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from scheduler_core.db.tables import executions
from tests.helpers.journal import abandon_running_execution, execution_row, insert_rows, wait_for_status
from tests.webapp.conftest import Auth, csrf_token
from webapp.node import accounts_of, audit_of


def _unknown_execution(app: Flask) -> Any:
    scheduler = app.extensions["hai_scheduler"]
    scheduler.register(TaskDefinition(id="billing", name="Billing", cron="0 2 * * *"))
    occurrence = abandon_running_execution(scheduler.engine, "billing", started=True)
    scheduler.start()  # its expiry scan isolates the abandoned execution
    try:
        return wait_for_status(scheduler, occurrence, "unknown")
    finally:
        scheduler.stop()


def _resolve(client: FlaskClient, occurrence: str, **form: Any) -> Any:
    token = csrf_token(client, "/executions/unknown")
    return client.post(f"/executions/{occurrence}/resolve", data={"csrf_token": token, **form})


def test_list_and_filters(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = app.extensions["hai_scheduler"]
    scheduler.set_hooks({"on_task_execute": lambda e: "ok"})
    scheduler.register(TaskDefinition(id="report", name="Report", cron="0 2 * * *"))
    log = scheduler.trigger("report", source="dashboard-test")
    auth.login()
    page = client.get("/executions/?status=success")
    assert page.status_code == 200 and log.occurrence_id in page.get_data(as_text=True)
    assert log.occurrence_id not in client.get("/executions/?status=failed").get_data(as_text=True)
    fragment = client.get("/executions/?task=report", headers={"HX-Request": "true"})
    assert "<html" not in fragment.get_data(as_text=True) and log.occurrence_id in fragment.get_data(as_text=True)
    assert "HX-Request" in fragment.headers["Vary"]


def test_resolve_unknown_with_reason_and_version(app: Flask, client: FlaskClient, auth: Auth) -> None:
    unknown = _unknown_execution(app)
    auth.login()
    page = client.get("/executions/unknown").get_data(as_text=True)
    assert unknown.occurrence_id in page and f'value="{unknown.updated_at}"' in page
    missing_reason = _resolve(client, unknown.occurrence_id, status="discarded", reason=" ",
                              expected_updated_at=unknown.updated_at)
    assert missing_reason.status_code == 400 and "A reason is required" in missing_reason.get_data(as_text=True)
    stale = _resolve(client, unknown.occurrence_id, status="discarded", reason="checked the ledger",
                     expected_updated_at=unknown.updated_at - 1)
    assert stale.status_code == 303
    assert "changed since the page was loaded" in client.get("/executions/unknown").get_data(as_text=True)
    scheduler = app.extensions["hai_scheduler"]
    assert scheduler.execution.get(unknown.occurrence_id).status == "unknown"  # nothing changed
    done = _resolve(client, unknown.occurrence_id, status="discarded", reason="checked the ledger",
                    expected_updated_at=unknown.updated_at)
    assert done.status_code == 303
    resolved = scheduler.execution.get(unknown.occurrence_id)
    assert (resolved.status, resolved.resolved_by, resolved.resolution_reason) == (
        "discarded", "admin", "checked the ledger")
    [entry] = audit_of(app).list(action="execution.resolve_unknown")
    assert (entry.actor, entry.target, entry.before, entry.after, entry.reason) == (
        "admin", unknown.occurrence_id, {"status": "unknown"}, {"status": "discarded"}, "checked the ledger")


def test_viewer_cannot_resolve(app: Flask, client: FlaskClient, auth: Auth) -> None:
    unknown = _unknown_execution(app)
    accounts_of(app).create("viewer1", "viewer", generate_password_hash("viewer-pw-1"))
    auth.login("viewer1", "viewer-pw-1")
    assert "Resolve as" not in client.get("/executions/unknown").get_data(as_text=True)
    refused = _resolve(client, unknown.occurrence_id, status="discarded", reason="x",
                       expected_updated_at=unknown.updated_at)
    assert refused.status_code == 403
    assert app.extensions["hai_scheduler"].execution.get(unknown.occurrence_id).status == "unknown"


# --- the journal list: keyset pages, filters, running now ---------------------------------------

CODE = re.compile(r"<code>([^<]+)</code>")
OLDER = re.compile(r'<a [^>]*href="([^"]+)"[^>]*rel="next"')


def _journal_ids(page: str) -> list[str]:
    """Occurrence ids of the journal table (after the running-now section)."""
    return CODE.findall(page.split('id="rows"', 1)[-1])


def _walk(client: FlaskClient, url: str) -> list[str]:
    seen: list[str] = []
    while True:
        response = client.get(url)
        assert response.status_code == 200, url
        page = response.get_data(as_text=True)
        seen += _journal_ids(page)
        older = OLDER.search(page)
        if older is None:
            return seen
        url = html.unescape(older.group(1))


def test_keyset_pages_walk_every_execution_once(app: Flask, client: FlaskClient, auth: Auth) -> None:
    rows = [execution_row(f"occ-{i:03d}", 1_700_000_000_000 + i // 7, ("success", "failed")[i % 2],
                          task_id=("a", "b", "c")[i % 3]) for i in range(111)]  # seven rows share a created_at
    insert_rows(app.extensions["hai_engine"], executions, rows)
    newest_first = sorted(rows, key=lambda r: (r["created_at"], r["occurrence_id"]), reverse=True)
    accounts_of(app).create("viewer1", "viewer", generate_password_hash("viewer-pw-1"))
    auth.login("viewer1", "viewer-pw-1")
    assert _walk(client, "/executions/") == [r["occurrence_id"] for r in newest_first]
    assert _walk(client, "/executions/?status=failed&task=b") == [
        r["occurrence_id"] for r in newest_first if r["status"] == "failed" and r["task_id"] == "b"]
    first = client.get("/executions/").get_data(as_text=True)
    second = client.get(html.unescape(OLDER.search(first).group(1)), headers={"HX-Request": "true"})
    body = second.get_data(as_text=True)
    assert "<html" not in body and "Newer" in body and 'hx-target="#rows"' in body
    assert _journal_ids(body) == [r["occurrence_id"] for r in newest_first[50:100]]


def test_bad_filters_name_their_field(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    for query, message in (("status=exploded", "Choose one of"), ("task=" + "t" * 129, "At most 128"),
                           ("before=nonsense", "before: must be a page cursor")):
        response = client.get(f"/executions/?{query}")
        assert response.status_code == 400 and message in response.get_data(as_text=True), query
    fragment = client.get("/executions/?status=exploded", headers={"HX-Request": "true"})
    assert fragment.status_code == 200 and 'role="alert"' in fragment.get_data(as_text=True)


def test_running_now_refreshes(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = app.extensions["hai_scheduler"]
    entered, release = threading.Event(), threading.Event()

    def slow(event: Any) -> Any:
        entered.set()
        release.wait(10)
        return "ok"

    scheduler.set_hooks({"on_task_execute": slow})
    scheduler.register(TaskDefinition(id="slow", name="Slow", cron="0 2 * * *"))
    scheduler.start()
    worker = threading.Thread(target=scheduler.trigger, args=("slow",))
    worker.start()
    try:
        assert entered.wait(10)
        auth.login()
        page = client.get("/executions/").get_data(as_text=True)
        assert 'hx-get="/executions/running" hx-trigger="every 5s"' in page
        fragment = client.get("/executions/running", headers={"HX-Request": "true"}).get_data(as_text=True)
        assert "<html" not in fragment and ">slow</a></td>" in fragment and scheduler.config.node_id in fragment
        assert ">slow</a></td>" in client.get("/executions/running").get_data(as_text=True)  # a page without HTMX
    finally:
        release.set()
        worker.join()
        scheduler.stop()
    assert "<td>slow</td>" not in client.get("/executions/running", headers={"HX-Request": "true"}).get_data(
        as_text=True)


def test_a_refused_resolution_shows_its_errors_on_the_card_or_above_the_cards(app: Flask, client: FlaskClient,
                                                                              auth: Auth) -> None:
    unknown = _unknown_execution(app)
    auth.login()
    on_card = _resolve(client, unknown.occurrence_id, status="maybe", reason=" ")
    page = html.unescape(on_card.get_data(as_text=True))
    card = page.split(unknown.occurrence_id, 1)[1]
    assert on_card.status_code == 400 and "Choose success or discarded." in card
    assert 'aria-invalid="true"' in card and "The page is missing the row version; reload it." in card
    not_shown = _resolve(client, "no-such-occurrence", status="success", reason=" ", expected_updated_at=1)
    page = html.unescape(not_shown.get_data(as_text=True))
    assert not_shown.status_code == 400
    assert 'role="alert">reason: A reason is required' in page.split(unknown.occurrence_id, 1)[0]
