"""Notifications pages: queue counts and rows, dead letters with requeue and exact bulk requeue,
unknown deliveries, templates with preview, providers with secrets masked.

The app gets a real Reach: webhook providers pointed at a real HTTP server on 127.0.0.1 (one
answers 400, so an idempotent delivery dies at once; one answers 503 without idempotency, so a
delivery becomes unknown), a console provider, and a do-not-disturb window around now with
strategy delay. Rows are made through the real queue; delivery rounds run on a second Reach on
the same database without the window (the app's own Reach holds everything during it).
"""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from scheduler_core.db import close_engine
from scheduler_core.reach import Reach
from scheduler_core.reach.queue import SETTLE_GRACE_MS
from scheduler_core.store.reach_queue import QueueRepository
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.helpers.http_server import RecordingServer
from tests.webapp.conftest import ADMIN_PASSWORD, Auth, csrf_token
from webapp import create_app
from webapp.node import accounts_of, audit_of
from webapp.notifications import PAGE

DND_ZONE = "Asia/Kolkata"  # a half-hour offset: HH:MM must be the window's wall time, not UTC's
SECRETS = ("hook-secret-token-123", "url-password-456", "smtp-password-789", "sms-secret-abc", "LTAIkeyid000",
           "T0AAAA1111bbbbCCCC2222dddd")


def _window_around_now() -> dict[str, Any]:
    local = datetime.now(UTC).astimezone(ZoneInfo(DND_ZONE))
    start, end = local - timedelta(hours=1), local + timedelta(hours=1)
    return {"enabled": True, "strategy": "delay", "timezone": DND_ZONE, "start": start.strftime("%H:%M"),
            "end": end.strftime("%H:%M")}


def _reach_config(receiver: RecordingServer, dnd: dict[str, Any]) -> dict[str, Any]:
    return {
        "providers": [
            {"name": "hook", "type": "api", "url": receiver.url("/status/400"), "idempotent": True,
             "headers": {"Authorization": "Bearer hook-secret-token-123", "X-Team": "ops-team"}},
            {"name": "flaky", "type": "api",
             "url": f"http://robot:url-password-456@127.0.0.1:{receiver.port}/status/503"},
            {"name": "slack", "type": "api",
             "url": f"http://127.0.0.1:{receiver.port}/services/T0AAAA1111bbbbCCCC2222dddd"},
            {"name": "mail", "type": "smtp", "host": "127.0.0.1", "port": 2525, "tls": "none",
             "username": "robot", "password": "smtp-password-789", "from": "robot@example.com"},
            {"name": "sms", "type": "aliyun-sms", "access_key_id": "LTAIkeyid000",
             "access_key_secret": "sms-secret-abc", "sign_name": "Hai"},
            {"name": "log", "type": "console"},
        ],
        "templates": [{"name": "otp", "provider": "log", "subject": "Code {code}",
                       "body": "Your code is {code}; valid {minutes} minutes."}],
        "dnd": dnd,
        "queue": {"max_attempts": 3, "retry_delay_ms": 1_000, "max_retry_delay_ms": 4_000},
    }


@pytest.fixture
def receiver() -> Iterator[RecordingServer]:
    server = RecordingServer()
    yield server
    server.close()


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, receiver: RecordingServer) -> Iterator[Flask]:
    monkeypatch.delenv("HAI_SECRET_KEY", raising=False)
    application = create_app({"DATABASE_URL": f"sqlite:///{tmp_path}/dash.db", "ADMIN_PASSWORD": ADMIN_PASSWORD,
                              "TESTING": True, "REACH": _reach_config(receiver, _window_around_now())})
    yield application
    application.extensions["hai_scheduler"].close()
    application.extensions["hai_reach"].close()
    close_engine(application.extensions["hai_engine"])


@pytest.fixture
def runner(app: Flask, receiver: RecordingServer) -> Iterator[Reach]:
    """Delivery rounds outside do-not-disturb, on the app's database."""
    made = Reach(app.extensions["hai_engine"], _reach_config(receiver, {}), node_id="rounds", auto_migrate=False)
    made.init()
    yield made
    made.close()


def _reach(app: Flask) -> Reach:
    reach: Reach = app.extensions["hai_reach"]
    return reach


def _enqueue(app: Flask, provider: str, recipient: str = "user-1", template: str | None = None) -> str:
    queue_id = str(uuid.uuid4())
    QueueRepository(app.extensions["hai_engine"], "test", 60_000).enqueue(
        queue_id, provider, template, recipient, "Subject", "secret body text", {}, (3, 1_000, 4_000), None)
    return queue_id


def _delivered(app: Flask, runner: Reach, provider: str, count: int = 1, status: str = "dead") -> list[str]:
    recipient = "bad\x01recipient" if provider == "log" else "recipient-42@example.com"
    ids = [_enqueue(app, provider, recipient) for _ in range(count)]
    runner.run_round()
    for queue_id in ids:
        entry = _reach(app).queue.get(queue_id)
        assert entry is not None and entry.status == status
    return ids


def _user(app: Flask, auth: Auth, role: str) -> None:
    accounts_of(app).create(f"{role}1", role, generate_password_hash(f"{role}-pw-1"))
    auth.login(f"{role}1", f"{role}-pw-1")


def _post(client: FlaskClient, path: str, page: str = "/notifications/", **form: Any) -> Any:
    return client.post(path, data={"csrf_token": csrf_token(client, page), **form})


def _text(response: Any) -> str:
    return html.unescape(response.get_data(as_text=True))


def _hidden(page: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert match, name
    return match.group(1)


def _audit(app: Flask, action: str) -> list[Any]:
    entries: list[Any] = audit_of(app).list(action=action)
    return entries


# --- pages ------------------------------------------------------------------------------------


def test_every_page_renders_for_a_viewer(app: Flask, client: FlaskClient, auth: Auth, runner: Reach) -> None:
    _delivered(app, runner, "hook")
    _delivered(app, runner, "flaky", status="unknown")
    _user(app, auth, "viewer")
    for path in ("/notifications/", "/notifications/?status=dead", "/notifications/counts", "/notifications/dead",
                 "/notifications/dead?provider=hook&failure=permanent_rejection", "/notifications/dead/bulk",
                 "/notifications/unknown", "/notifications/templates", "/notifications/templates/show/otp",
                 "/notifications/providers"):
        # the counts are an htmx fragment: opened directly, they lead to the queue (test_fragments_direct.py)
        response = client.get(path, headers={"HX-Request": "true"} if path.endswith("/counts") else {})
        assert response.status_code == 200, path
        page = _text(response)
        assert "recipient-42@example.com" not in page and "secret body text" not in page, path
    assert "/requeue" not in _text(client.get("/notifications/dead"))  # no operator actions for a viewer
    assert "Resolve as" not in _text(client.get("/notifications/unknown"))
    assert client.get("/notifications/templates/new").status_code == 403


def test_queue_counts_link_and_refresh_live(app: Flask, client: FlaskClient, auth: Auth, runner: Reach) -> None:
    dead = _delivered(app, runner, "hook", count=2)
    auth.login()
    page = _text(client.get("/notifications/?status=dead"))
    assert 'href="/notifications/?status=dead"' in page and 'hx-trigger="every 5s"' in page
    assert all(queue_id in page for queue_id in dead)
    fragment = client.get("/notifications/counts?status=dead", headers={"HX-Request": "true"})
    text = _text(fragment)
    assert "<html" not in text and 'id="queue-counts"' in text and re.search(r'badge-dead">dead</span></h2>\s*'
                                                                             r'<p class="figure">2</p>', text)
    rows = client.get("/notifications/?status=dead", headers={"HX-Request": "true"})
    assert "<html" not in _text(rows) and dead[0] in _text(rows) and "HX-Request" in rows.headers["Vary"]


def test_queue_pages_by_key(app: Flask, client: FlaskClient, auth: Auth, runner: Reach) -> None:
    dead = _delivered(app, runner, "hook", count=PAGE + 1)
    auth.login()
    raw = client.get("/notifications/?status=dead").get_data(as_text=True)
    older = re.search(r'href="(/notifications/\?status=dead&amp;after=[^"]+)"', raw)
    assert older
    first, second = html.unescape(raw), _text(client.get(html.unescape(older.group(1))))
    on_first = [queue_id for queue_id in dead if queue_id in first]
    on_second = [queue_id for queue_id in dead if queue_id in second]
    assert len(on_first) == PAGE and len(on_second) == 1 and sorted(on_first + on_second) == sorted(dead)
    assert "after=" not in second.split('aria-label="Pages"')[1].split("Newest")[1]  # the last page
    bad = client.get("/notifications/?status=dead&after=garbage")
    assert bad.status_code == 400 and "after" in _text(bad)


def test_held_by_do_not_disturb_shows_until_when(app: Flask, client: FlaskClient, auth: Auth) -> None:
    result = _reach(app).send({"template": "otp", "to": "user-7", "vars": {"code": "1", "minutes": 5}})
    assert result.deferred and result.queue_id
    entry = _reach(app).queue.get(result.queue_id)
    assert entry is not None
    auth.login()
    page = _text(client.get("/notifications/?status=pending"))
    end = app.config["REACH"]["dnd"]["end"]  # the app's window (made a minute earlier, perhaps)
    utc = datetime.fromtimestamp(entry.next_attempt_at / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f'<span class="held" title="{utc}">held until {end}</span>' in page and DND_ZONE in page
    assert "user-7" not in page


# --- dead letters ----------------------------------------------------------------------------------


def test_requeue_one_with_a_version(app: Flask, client: FlaskClient, auth: Auth, runner: Reach) -> None:
    [queue_id] = _delivered(app, runner, "hook")
    entry = _reach(app).queue.get(queue_id)
    assert entry is not None
    _user(app, auth, "operator")
    page = _text(client.get("/notifications/dead"))
    assert queue_id in page and "permanent_rejection" in page and f'value="{entry.updated_at}"' in page
    stale = _post(client, f"/notifications/dead/{queue_id}/requeue", expected_updated_at=entry.updated_at - 1)
    assert stale.status_code == 303
    assert "changed since the page was loaded" in _text(client.get("/notifications/dead"))
    assert _reach(app).queue.get(queue_id).status == "dead"  # type: ignore[union-attr]
    missing = _post(client, f"/notifications/dead/{queue_id}/requeue")
    assert missing.status_code == 400 and "missing the row version" in _text(missing)
    done = _post(client, f"/notifications/dead/{queue_id}/requeue", expected_updated_at=entry.updated_at)
    assert done.status_code == 303
    requeued = _reach(app).queue.get(queue_id)
    assert requeued is not None and (requeued.status, requeued.attempt_count) == ("pending", 0)
    [audit] = _audit(app, "notification.requeue")
    assert (audit.actor, audit.target, audit.before["status"], audit.after["status"]) == (
        "operator1", queue_id, "dead", "pending")


def test_dead_letters_filter(app: Flask, client: FlaskClient, auth: Auth, runner: Reach) -> None:
    hooked = _delivered(app, runner, "hook")
    logged = _delivered(app, runner, "log")
    auth.login()
    by_provider = _text(client.get("/notifications/dead?provider=hook"))
    assert hooked[0] in by_provider and logged[0] not in by_provider
    by_class = _text(client.get("/notifications/dead?failure=invalid_message", headers={"HX-Request": "true"}))
    assert logged[0] in by_class and hooked[0] not in by_class and "<html" not in by_class
    bad = client.get("/notifications/dead?failure=bored")
    assert bad.status_code == 400 and "failure" in _text(bad)


def test_bulk_requeue_takes_exactly_the_previewed_set(app: Flask, client: FlaskClient, auth: Auth,
                                                      runner: Reach) -> None:
    previewed = _delivered(app, runner, "hook", count=3)
    other = _delivered(app, runner, "log")
    engine = app.extensions["hai_engine"]  # the app's and the runner's
    set_clock_offset(engine, clock_offset(engine) + SETTLE_GRACE_MS + 500)  # past the preview's grace
    _user(app, auth, "operator")
    preview = _text(client.get("/notifications/dead/bulk?provider=hook"))
    assert re.search(r'id="bulk-count">3<', preview) and 'data-confirm="Requeue 3 dead letters?"' in preview
    form = {name: _hidden(preview, name) for name in ("provider", "failure", "template", "bound_at", "bound_id",
                                                      "count")}
    changed = previewed[0]
    entry = _reach(app).queue.get(changed)
    assert entry is not None
    _reach(app).queue.requeue_dead(changed, entry.updated_at)  # changed since the preview
    died_later = _delivered(app, runner, "hook")  # died after the preview (the round kills `changed` again)
    done = _post(client, "/notifications/dead/bulk", "/notifications/dead", **form)
    assert done.status_code == 303 and done.headers["Location"].endswith("/notifications/dead?provider=hook")
    message = _text(client.get("/notifications/dead"))
    assert "Requeued 2 of the 3 previewed dead letters. 1 had changed since the preview" in message
    statuses = {queue_id: _reach(app).queue.get(queue_id).status  # type: ignore[union-attr]
                for queue_id in [*previewed, *died_later, *other]}
    assert statuses == {previewed[1]: "pending", previewed[2]: "pending", changed: "dead", died_later[0]: "dead",
                        other[0]: "dead"}
    [audit] = _audit(app, "notification.bulk_requeue")
    assert (audit.actor, audit.before["previewed"], audit.before["filter"]["provider"], audit.after) == (
        "operator1", 3, "hook", {"requeued": 2, "changed": 1})


def test_bulk_requeue_with_a_broken_form_changes_nothing(app: Flask, client: FlaskClient, auth: Auth,
                                                         runner: Reach) -> None:
    dead = _delivered(app, runner, "hook")
    _user(app, auth, "operator")
    broken = _post(client, "/notifications/dead/bulk", "/notifications/dead", provider="hook", bound_at="soon",
                   count="1")
    assert broken.status_code == 400 and "bound_at" in _text(broken) and "Preview again" in _text(broken)
    wrong = _post(client, "/notifications/dead/bulk", "/notifications/dead", bound_at="99999999999", bound_id="x",
                  count="1")
    assert wrong.status_code == 400 and "bound_id" in _text(wrong)
    assert _reach(app).queue.get(dead[0]).status == "dead"  # type: ignore[union-attr]
    assert _audit(app, "notification.bulk_requeue") == []


# --- unknown deliveries -------------------------------------------------------------------------------


def test_resolve_unknown_as_sent_with_message_id(app: Flask, client: FlaskClient, auth: Auth, runner: Reach) -> None:
    [queue_id] = _delivered(app, runner, "flaky", status="unknown")
    entry = _reach(app).queue.get(queue_id)
    assert entry is not None
    _user(app, auth, "operator")
    page = _text(client.get("/notifications/unknown"))
    assert queue_id in page and f'value="{entry.updated_at}"' in page
    path = f"/notifications/unknown/{queue_id}/resolve"
    no_reason = _post(client, path, status="sent", reason=" ", expected_updated_at=entry.updated_at)
    assert no_reason.status_code == 400 and "A reason is required" in _text(no_reason)
    with_id = _post(client, path, status="discarded", message_id="m-1", reason="x",
                    expected_updated_at=entry.updated_at)
    assert with_id.status_code == 400 and "only goes with" in _text(with_id)
    card = _text(with_id).split(queue_id, 1)[1]  # the refused card keeps what was chosen and typed
    assert 'value="discarded" checked' in card and 'value="m-1"' in card and ">x</textarea>" in card
    stale = _post(client, path, status="sent", reason="seen in the provider console",
                  expected_updated_at=entry.updated_at - 1)
    assert stale.status_code == 303 and "changed since the page was loaded" in _text(client.get(
        "/notifications/unknown"))
    assert _reach(app).queue.get(queue_id).status == "unknown"  # type: ignore[union-attr]
    done = _post(client, path, status="sent", message_id="prov-msg-77", reason="seen in the provider console",
                 expected_updated_at=entry.updated_at)
    assert done.status_code == 303
    resolved = _reach(app).queue.get(queue_id)
    assert resolved is not None and (resolved.status, resolved.message_id) == ("sent", "prov-msg-77")
    [audit] = _audit(app, "notification.resolve_unknown")
    assert (audit.actor, audit.target, audit.before["status"], audit.after, audit.reason) == (
        "operator1", queue_id, "unknown", {"status": "sent", "message_id": "prov-msg-77"},
        "seen in the provider console")


# --- templates --------------------------------------------------------------------------------------


def test_template_preview_and_missing_variables(client: FlaskClient, auth: Auth) -> None:
    auth.login()
    page = _text(client.get("/notifications/templates"))
    assert 'href="/notifications/templates/show/otp"' in page and "read-only" in page
    missing = _text(client.get("/notifications/templates/show/otp", query_string={"vars": "code=123"},
                               headers={"HX-Request": "true"}))
    assert "Missing variable: minutes" in missing and "<html" not in missing
    none_given = _text(client.get("/notifications/templates/show/otp", query_string={"vars": ""}))
    assert "Missing variables: code, minutes" in none_given
    rendered = _text(client.get("/notifications/templates/show/otp", query_string={"vars": "code=123\nminutes=5"}))
    assert "Your code is 123; valid 5 minutes." in rendered and "Code 123" in rendered
    as_json = _text(client.get("/notifications/templates/show/otp",
                               query_string={"vars": '{"code": "9", "minutes": 2}'}))
    assert "Your code is 9; valid 2 minutes." in as_json
    bad = client.get("/notifications/templates/show/otp", query_string={"vars": "code"})
    assert bad.status_code == 400 and "line 1: expected name=value" in _text(bad)
    assert client.get("/notifications/templates/show/nope").status_code == 404


def test_stored_templates_create_edit_delete(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    form = {"name": "welcome", "provider": "log", "subject": "Hi {name}", "body": "Welcome, {name}!"}
    empty = _post(client, "/notifications/templates/new", "/notifications/templates/new", **{**form, "body": " "})
    assert empty.status_code == 400 and "must be a non-empty string" in _text(empty)
    assert 'aria-invalid="true"' in _text(empty)
    shadow = _post(client, "/notifications/templates/new", "/notifications/templates/new", **{**form, "name": "otp"})
    assert shadow.status_code == 400 and "configured template" in _text(shadow)
    no_provider = _post(client, "/notifications/templates/new", "/notifications/templates/new",
                        **{**form, "provider": "fax"})
    assert no_provider.status_code == 400 and "names no configured provider" in _text(no_provider)
    assert _reach(app).templates.stored() == []
    created = _post(client, "/notifications/templates/new", "/notifications/templates/new", **form)
    assert created.status_code == 303 and created.headers["Location"].endswith("/notifications/templates/show/welcome")
    again = _post(client, "/notifications/templates/new", "/notifications/templates/new", **form)
    assert again.status_code == 400 and "already exists" in _text(again)
    stored = _reach(app).templates.stored_one("welcome")
    assert stored is not None and stored.body == "Welcome, {name}!"
    edit = _text(client.get("/notifications/templates/edit/welcome"))
    assert f'name="expected_updated_at" value="{stored.updated_at}"' in edit
    stale = _post(client, "/notifications/templates/edit/welcome", "/notifications/templates",
                  **{**form, "body": "Hello {name}", "expected_updated_at": stored.updated_at - 1})
    assert stale.status_code == 303
    assert "changed since the page was loaded" in _text(client.get("/notifications/templates"))
    saved = _post(client, "/notifications/templates/edit/welcome", "/notifications/templates",
                  **{**form, "body": "Hello {name}", "expected_updated_at": stored.updated_at})
    assert saved.status_code == 303
    updated = _reach(app).templates.stored_one("welcome")
    assert updated is not None and updated.body == "Hello {name}"
    detail = _text(client.get("/notifications/templates/show/welcome"))
    assert 'data-confirm="Delete template welcome?"' in detail
    old_version = _post(client, "/notifications/templates/delete/welcome", "/notifications/templates",
                        expected_updated_at=stored.updated_at)
    assert old_version.status_code == 303 and _reach(app).templates.stored_one("welcome") is not None
    deleted = _post(client, "/notifications/templates/delete/welcome", "/notifications/templates",
                    expected_updated_at=updated.updated_at)
    assert deleted.status_code == 303 and _reach(app).templates.stored_one("welcome") is None
    saves = _audit(app, "template.save")
    assert [(e.before, e.after["body"]) for e in reversed(saves)] == [
        (None, "Welcome, {name}!"), ({**form, "body": "Welcome, {name}!"}, "Hello {name}")]
    [removed] = _audit(app, "template.delete")
    assert (removed.actor, removed.target, removed.before["body"]) == ("admin", "welcome", "Hello {name}")
    assert client.get("/notifications/templates/edit/otp").status_code == 404  # configured: read-only


# --- providers ---------------------------------------------------------------------------------------


def test_providers_show_settings_with_secrets_masked(client: FlaskClient, auth: Auth) -> None:
    auth.login()
    page = client.get("/notifications/providers").get_data(as_text=True)
    for secret in SECRETS:
        assert secret not in page, secret
    text = html.unescape(page)
    assert "ops-team" in text and "***" in text and "robot@example.com" in text and "/status/400" in text
    assert "hook-secret" not in text and "Bearer" not in text


# --- roles and CSRF -----------------------------------------------------------------------------------


def _every_post(app: Flask, runner: Reach) -> list[tuple[str, dict[str, Any]]]:
    [dead] = _delivered(app, runner, "hook")
    [unknown] = _delivered(app, runner, "flaky", status="unknown")
    _reach(app).templates.create("kept", "log", "Body {x}")
    dead_version = _reach(app).queue.get(dead).updated_at  # type: ignore[union-attr]
    unknown_version = _reach(app).queue.get(unknown).updated_at  # type: ignore[union-attr]
    kept = _reach(app).templates.stored_one("kept").updated_at  # type: ignore[union-attr]
    return [
        (f"/notifications/dead/{dead}/requeue", {"expected_updated_at": dead_version}),
        ("/notifications/dead/bulk", {"bound_at": 2**40, "bound_id": "", "count": 1}),
        (f"/notifications/unknown/{unknown}/resolve", {"status": "sent", "reason": "r",
                                                       "expected_updated_at": unknown_version}),
        ("/notifications/templates/new", {"name": "n", "provider": "log", "body": "b"}),
        ("/notifications/templates/edit/kept", {"provider": "log", "body": "changed", "expected_updated_at": kept}),
        ("/notifications/templates/delete/kept", {"expected_updated_at": kept}),
    ]


def _unchanged(app: Flask) -> None:
    counts = _reach(app).queue.counts()
    assert (counts["dead"], counts["unknown"], counts["pending"]) == (1, 1, 0)
    assert [(t.name, t.body) for t in _reach(app).templates.stored()] == [("kept", "Body {x}")]
    actions = [e.action for e in audit_of(app).list()]
    assert not [action for action in actions if action.startswith(("notification.", "template."))]


def test_a_viewer_gets_403_on_every_post(app: Flask, client: FlaskClient, auth: Auth, runner: Reach) -> None:
    posts = _every_post(app, runner)
    _user(app, auth, "viewer")
    for path, form in posts:
        assert _post(client, path, **form).status_code == 403, path
    _unchanged(app)


def test_an_operator_cannot_change_templates(app: Flask, client: FlaskClient, auth: Auth, runner: Reach) -> None:
    posts = _every_post(app, runner)
    _user(app, auth, "operator")
    for path, form in posts:
        if "/templates/" in path:
            assert _post(client, path, **form).status_code == 403, path
    _unchanged(app)


def test_posts_without_csrf_token_are_refused(app: Flask, client: FlaskClient, auth: Auth, runner: Reach) -> None:
    posts = _every_post(app, runner)
    auth.login()
    for path, form in posts:
        refused = client.post(path, data=form)
        assert refused.status_code == 400 and "expired or was not sent from this dashboard" in _text(refused), path
    _unchanged(app)
