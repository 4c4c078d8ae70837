"""Tasks pages: list and search, the api / hook form, enable / disable / delete, trigger,
task detail with history and rerun. Real scheduler, real SQLite, real HTTP server."""

from __future__ import annotations

import html
import json
import re
import threading
from html.parser import HTMLParser
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from scheduler_core import Scheduler, TaskDefinition
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.helpers.http_server import RecordingServer
from tests.helpers.journal import abandon_running_execution, wait_for_status
from tests.webapp.conftest import Auth, csrf_token
from webapp.node import accounts_of, audit_of

SECRETS = ("Bearer s3cr3t-header", "hunter2-url", "p4ram-token")
API_FORM = {
    "id": "billing", "name": "Nightly billing", "description": "Charges the cards", "cron": "30 2 * * 1-5",
    "timezone": "Europe/Berlin", "enabled": "1", "retry_max_attempts": "1", "retry_backoff": "", "kind": "api",
    "url": "https://bot:hunter2-url@billing.example/run", "method": "POST",
    "headers": "Authorization: Bearer s3cr3t-header\nAccept: application/json", "body": '{"dry_run": false}',
    "timeout": "5000", "params": '{"token": "p4ram-token", "channel": "ops"}',
}


def _scheduler(app: Flask) -> Scheduler:
    scheduler: Scheduler = app.extensions["hai_scheduler"]
    return scheduler


def _login_as(app: Flask, auth: Auth, role: str) -> None:
    if role == "admin":
        auth.login()
        return
    accounts_of(app).create(f"{role}1", role, generate_password_hash(f"{role}-pw-1"))
    auth.login(f"{role}1", f"{role}-pw-1")


def _post(client: FlaskClient, path: str, data: dict[str, Any], csrf: bool = True) -> Any:
    form = dict(data)
    if csrf:
        form["csrf_token"] = csrf_token(client, "/tasks/")
    return client.post(path, data=form)


def _text(response: Any) -> str:
    return str(response.get_data(as_text=True))


def _field_error(page: str, field: str) -> str:
    match = re.search(rf'id="{field}-error">([^<]*)<', page)
    return match.group(1) if match else ""


def _audit(app: Flask, action: str) -> list[Any]:
    return audit_of(app).list(action=action)


class _FormReader(HTMLParser):
    """What a browser would submit from the first form whose action ends with ``action``."""

    def __init__(self, action: str) -> None:
        super().__init__()
        self.action, self.inside, self.done = action, False, False
        self.values: dict[str, str] = {}
        self._textarea: str | None = None
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and not self.done and a.get("action", "").endswith(self.action):
            self.inside = True
        if not self.inside:
            return
        if tag == "input" and a.get("name") and (a.get("type") != "checkbox" or "checked" in a):
            self.values[a["name"]] = a.get("value", "")
        elif tag == "textarea":
            self._textarea = a["name"]
            self.values[a["name"]] = ""
        elif tag == "select":
            self._select = a["name"]
        elif tag == "option" and self._select and "selected" in a:
            self.values[self._select] = a.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea":
            self._textarea = None
        elif tag == "select":
            self._select = None
        elif tag == "form" and self.inside:
            self.inside, self.done = False, True

    def handle_data(self, data: str) -> None:
        if self.inside and self._textarea:
            self.values[self._textarea] += data


def _form_values(page: str, action: str) -> dict[str, str]:
    reader = _FormReader(action)
    reader.feed(page)
    assert reader.done, f"no form posting to {action}"
    return {k: v[1:] if k in ("headers", "body", "params", "description") and v.startswith("\n") else v
            for k, v in reader.values.items()}


def _assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def _catalogue(app: Flask) -> None:
    scheduler = _scheduler(app)
    scheduler.register(TaskDefinition(id="alpha", name="Nightly alpha", cron="30 2 * * 1-5",
                                      timezone="Europe/Berlin"))
    scheduler.register(TaskDefinition(id="beta", name="Hourly beta", cron="0 * * * *", enabled=False,
                                      handler={"kind": "api", "url": "http://127.0.0.1:9/x"}))
    scheduler.register(TaskDefinition(id="gamma", name="Gamma", cron="0 6 * * *", timezone="America/New_York"))
    scheduler.set_hooks({"on_task_execute": lambda event: (_ for _ in ()).throw(RuntimeError("boom"))})
    assert scheduler.trigger("alpha").status == "failed"
    scheduler.set_hooks({"on_task_execute": lambda event: "ok"})
    assert scheduler.trigger("gamma").status == "success"


# --- list and search -------------------------------------------------------------------------


def test_list_renders_for_a_viewer_with_zones_and_last_outcomes(app: Flask, client: FlaskClient,
                                                                auth: Auth) -> None:
    _catalogue(app)
    _login_as(app, auth, "viewer")
    page = _text(client.get("/tasks/"))
    for expected in ("alpha", "beta", "gamma", "At 02:30, Monday through Friday", "Europe/Berlin",
                     "badge-failed", "badge-success", 'hx-trigger="keyup changed delay:300ms, search"'):
        assert expected in page
    # alpha's next run is shown in Berlin time (02:30 CET/CEST) with UTC on hover.
    assert re.search(r'title="[0-9-]+ 0[01]:30 UTC">[0-9-]+ 02:30 CES?T<', page)
    assert re.search(r'title="[0-9-]+ 1[01]:00 UTC">[0-9-]+ 06:00 E[SD]T<', page)  # gamma in New York
    assert "New task" not in page  # a viewer sees no admin actions
    fragment = client.get("/tasks/?q=alpha", headers={"HX-Request": "true"})
    body = _text(fragment)
    assert fragment.status_code == 200 and "<html" not in body and "alpha" in body and "gamma" not in body
    assert "HX-Request" in fragment.headers["Vary"]
    assert 'id="search-error"' in body and 'hx-swap-oob="true"' in body  # clears an earlier error


@pytest.mark.parametrize(
    ("query", "shown", "hidden"),
    [
        ("status:failed", ["alpha"], ["beta", "gamma"]),
        ("status:never", ["beta"], ["alpha", "gamma"]),
        ("kind:api", ["beta"], ["alpha", "gamma"]),
        ("enabled:false", ["beta"], ["alpha", "gamma"]),
        ("tz:America/New_York", ["gamma"], ["alpha", "beta"]),
        ("nightly", ["alpha"], ["beta", "gamma"]),
        ("kind:hook status:success", ["gamma"], ["alpha", "beta"]),
    ],
)
def test_search_terms(app: Flask, client: FlaskClient, auth: Auth, query: str, shown: list[str],
                      hidden: list[str]) -> None:
    _catalogue(app)
    _login_as(app, auth, "viewer")
    rows = _text(client.get("/tasks/", query_string={"q": query}, headers={"HX-Request": "true"}))
    for task_id in shown:
        assert f"<code>{task_id}</code>" in rows
    for task_id in hidden:
        assert f"<code>{task_id}</code>" not in rows


def test_unknown_search_field_names_it_and_changes_no_results(app: Flask, client: FlaskClient, auth: Auth) -> None:
    _catalogue(app)
    _login_as(app, auth, "viewer")
    page = client.get("/tasks/?q=owner:bob")
    assert page.status_code == 400
    assert "unknown search field &#39;owner&#39;" in _text(page) and "<code>alpha</code>" not in _text(page)
    assert 'value="owner:bob"' in _text(page)  # the search box keeps what was typed
    typed = client.get("/tasks/?q=owner:bob", headers={"HX-Request": "true"})
    assert typed.headers["HX-Reswap"] == "none" and typed.headers["HX-Push-Url"] == "false"
    assert "unknown search field" in _text(typed) and "<table" not in _text(typed)  # rows stay as they were
    assert client.get("/tasks/?q=a%00b").status_code == 400
    assert client.get("/tasks/view/a%00b").status_code == 400
    bad_value = _text(client.get("/tasks/?q=status:exploded"))
    assert "status: must be one of" in bad_value


def test_keyset_pages(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = _scheduler(app)
    for number in range(55):
        scheduler.register(TaskDefinition(id=f"t{number:02d}", name=f"Task {number}", cron="0 2 * * *"))
    _login_as(app, auth, "viewer")
    first = _text(client.get("/tasks/"))
    assert "<code>t49</code>" in first and "<code>t50</code>" not in first
    assert "after=t49" in first and "Previous" not in first
    second = _text(client.get("/tasks/?after=t49"))
    assert "<code>t50</code>" in second and "<code>t54</code>" in second and "<code>t49</code>" not in second
    assert "before=t50" in second and ">Next<" not in second
    back = _text(client.get("/tasks/?before=t50"))
    assert "<code>t00</code>" in back and "<code>t49</code>" in back and "<code>t50</code>" not in back


def test_cron_preview_fragment(app: Flask, client: FlaskClient, auth: Auth) -> None:
    _login_as(app, auth, "viewer")
    swap = {"HX-Request": "true"}  # the form's fetch; opened directly it is a page (test_fragments_direct.py)
    good = _text(client.get("/tasks/cron-preview", query_string={"cron": "30 2 * * 1-5",
                                                                 "timezone": "Europe/Berlin"}, headers=swap))
    assert "At 02:30, Monday through Friday" in good and good.count("<li>") == 5
    assert re.search(r"02:30 CES?T <span class=\"muted\">\([0-9-]+ 0[01]:30 UTC\)", good)
    bad_cron = _text(client.get("/tasks/cron-preview", query_string={"cron": "61 * * * *", "timezone": "UTC"},
                                headers=swap))
    assert "field-error" in bad_cron and "61 * * * *" in bad_cron
    bad_zone = _text(client.get("/tasks/cron-preview", query_string={"cron": "* * * * *", "timezone": "Mars/Base"},
                                headers=swap))
    assert "timezone" in bad_zone and "Mars/Base" in bad_zone and "<li>" not in bad_zone
    empty = _text(client.get("/tasks/cron-preview", headers=swap))
    assert "Type a schedule" in empty


def test_cron_preview_reads_the_calendar_typed_beside_it(app: Flask, client: FlaskClient, auth: Auth) -> None:
    """The form's live preview shows the times the saved task would run at: its calendar applied
    (weekends and a holiday excluded, a window), and says so; a calendar with an error is left out."""
    _login_as(app, auth, "viewer")
    swap = {"HX-Request": "true"}
    query = {"cron": "0 9 * * *", "timezone": "Europe/Berlin", "calendar_exclude": "* * * * 6,0\n2027-03-03",
             "calendar_from": "2027-03-01T00:00", "calendar_until": "2027-03-10T00:00"}
    shown = _text(client.get("/tasks/cron-preview", query_string=query, headers=swap))
    days = re.findall(r"<li>2027-03-([0-9]{2}) 09:00", shown)
    assert days == ["01", "02", "04", "05", "08"], shown  # Mon, Tue, (Wed 3 excluded) Thu, Fri, (weekend) Mon
    assert "within its active window and exclusions" in shown
    broken = _text(client.get("/tasks/cron-preview", query_string={**query, "calendar_exclude": "not a date"},
                              headers=swap))
    assert "The calendar below has an error" in broken and broken.count("<li>") == 5
    none = _text(client.get("/tasks/cron-preview", query_string={**query, "calendar_until": "2027-03-01T00:01"},
                            headers=swap))
    assert "No run" in none and "<li>" not in none


# --- create / edit ----------------------------------------------------------------------------


def test_create_api_task_masks_its_secrets_everywhere(app: Flask, client: FlaskClient, auth: Auth) -> None:
    _login_as(app, auth, "admin")
    created = _post(client, "/tasks/new", API_FORM)
    assert created.status_code == 303 and created.headers["Location"].endswith("/tasks/view/billing")
    stored = _scheduler(app).task_ops.get("billing")
    assert stored.handler == {"kind": "api", "url": "https://bot:hunter2-url@billing.example/run", "method": "POST",
                              "headers": {"Authorization": "Bearer s3cr3t-header", "Accept": "application/json"},
                              "body": {"dry_run": False}, "timeout": 5000, "max_response_bytes": 1_048_576}
    assert (stored.params, stored.timezone, stored.enabled, stored.idempotent, stored.retry) == (
        {"token": "p4ram-token", "channel": "ops"}, "Europe/Berlin", True, False, None)
    [entry] = _audit(app, "task.create")
    assert entry.actor == "admin" and entry.target == "billing" and entry.after["name"] == "Nightly billing"
    _assert_no_secret(json.dumps([entry.before, entry.after]))
    for path in ("/tasks/", "/tasks/view/billing", "/tasks/edit/billing", "/tasks/delete/billing",
                 "/tasks/occurrences/billing", "/audit/"):
        response = client.get(path, headers={"HX-Request": "true"} if "occurrences" in path else {})
        assert response.status_code == 200, path
        _assert_no_secret(_text(response))
    edit = html.unescape(_text(client.get("/tasks/edit/billing")))
    assert "Authorization: ***" in edit and "https://bot:***@billing.example/run" in edit and '"token": "***"' in edit


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"cron": "61 * * * *"}, "cron", "is not a valid expression"),
        ({"cron": "* * * *"}, "cron", "has 4 fields"),
        ({"timezone": "Mars/Olympus"}, "timezone", "is not an IANA time zone"),
        ({"name": "  "}, "name", "must be a non-empty string"),
        ({"id": ""}, "id", "must be a non-empty string"),
        ({"params": "{not json"}, "params", "Not valid JSON"),
        ({"params": "[1, 2]"}, "params", "must be a JSON object"),
        ({"body": "{"}, "body", "Not valid JSON"),
        ({"headers": "no colon here"}, "headers", "Line 1"),
        ({"headers": "Bad Header: x"}, "headers", "is not a valid header name"),
        ({"url": "ftp://example.org/"}, "url", "must be an http:// or https:// URL"),
        ({"url": ""}, "url", "must be a non-empty string"),
        ({"method": "BREW"}, "method", "must be one of"),
        ({"timeout": "0"}, "timeout", "must be an integer between 1 and 86400000"),
        ({"timeout": "soon"}, "timeout", "whole milliseconds"),
        ({"retry_max_attempts": "0"}, "retry_max_attempts", "between 1 and 100"),
        ({"retry_max_attempts": "two"}, "retry_max_attempts", "whole number"),
        ({"retry_max_attempts": "+5"}, "retry_max_attempts", "whole number"),  # ASCII digits only, as elsewhere
        ({"retry_max_attempts": "٣"}, "retry_max_attempts", "whole number"),
        ({"retry_max_attempts": "3", "retry_backoff": "1_000"}, "retry_backoff", "is not a number of milliseconds"),
        ({"timeout": "+30000"}, "timeout", "whole milliseconds"),
        ({"retry_max_attempts": "3", "retry_backoff": "1000, -5"}, "retry_backoff", "is not a number of milliseconds"),
        ({"retry_backoff": "1s"}, "retry_backoff", "is not a number of milliseconds"),
        ({"kind": "ftp"}, "kind", "Choose api or hook"),
        ({"headers": "X-Api-Key: ***"}, "headers", "is masked (***): type the value again"),
        ({"name": "Bill\x00ing"}, "name", "Remove the NUL character"),
    ],
)
def test_invalid_input_rerenders_with_the_error_next_to_the_field(app: Flask, client: FlaskClient, auth: Auth,
                                                                  changes: dict[str, str], field: str,
                                                                  message: str) -> None:
    _login_as(app, auth, "admin")
    response = _post(client, "/tasks/new", {**API_FORM, **changes})
    page = _text(response)
    assert response.status_code == 400
    assert message in _field_error(page, field).replace("&#39;", "'"), _field_error(page, field)
    assert 'aria-invalid="true"' in page and "Nothing was saved" in page
    assert _scheduler(app).task_ops.search("").rows == [] and _audit(app, "task.create") == []
    # What was typed comes back as typed, secrets included (tests/webapp/test_forms_help.py).


def test_duplicate_id_is_refused(app: Flask, client: FlaskClient, auth: Auth) -> None:
    _scheduler(app).register(TaskDefinition(id="billing", name="Existing", cron="0 2 * * *"))
    _login_as(app, auth, "admin")
    response = _post(client, "/tasks/new", API_FORM)
    assert response.status_code == 400 and "already exists" in _field_error(_text(response), "id")
    assert _scheduler(app).task_ops.get("billing").name == "Existing"


def test_create_hook_task(app: Flask, client: FlaskClient, auth: Auth) -> None:
    _login_as(app, auth, "admin")
    form = {"id": "cleanup", "name": "Cleanup", "cron": "*/15 * * * *", "timezone": "", "kind": "hook",
            "idempotent": "1", "retry_max_attempts": "3", "retry_backoff": "1000, 5000", "url": "ignored"}
    assert _post(client, "/tasks/new", form).status_code == 303
    task = _scheduler(app).task_ops.get("cleanup")
    assert (task.handler_kind, task.timezone, task.enabled, task.idempotent) == ("hook", "UTC", False, True)
    assert task.retry is not None and (task.retry.max_attempts, task.retry.backoff_ms) == (3, (1000, 5000))


@pytest.mark.parametrize("kind", ["python", "js", "PYTHON"])
def test_code_handlers_are_refused(app: Flask, client: FlaskClient, auth: Auth, kind: str) -> None:
    scheduler = _scheduler(app)
    scheduler.register(TaskDefinition(id="code", name="Code", cron="0 2 * * *",
                                      handler={"kind": "python", "code": "def run(context):\n    return 1\n"}))
    _login_as(app, auth, "admin")
    created = _post(client, "/tasks/new", {**API_FORM, "id": "evil", "kind": kind,
                                           "code": "def run(context):\n    import os\n"})
    assert created.status_code == 400 and "never accepts code" in _field_error(_text(created), "kind")
    assert [row.id for row in scheduler.task_ops.search("").rows] == ["code"]
    before = scheduler.task_ops.get("code")
    edited = _post(client, "/tasks/edit/code", {**API_FORM, "kind": kind, "expected_updated_at": before.updated_at,
                                                "code": "def run(context):\n    return 2\n"})
    assert edited.status_code == 400 and "never accepts code" in _field_error(_text(edited), "kind")
    # Turning the code task into an api task through the form is refused as well: it is read-only.
    as_api = _post(client, "/tasks/edit/code", {**API_FORM, "expected_updated_at": before.updated_at})
    assert as_api.status_code == 400
    assert scheduler.task_ops.get("code") == before and _audit(app, "task.update") == []
    edit_page = client.get("/tasks/edit/code")
    assert edit_page.status_code == 303 and edit_page.headers["Location"].endswith("/tasks/view/code")
    detail = _text(client.get("/tasks/view/code"))
    assert "def run(context)" in detail and "read-only" in detail and "/tasks/edit/code" not in detail


def test_edit_keeps_masked_secrets_and_is_a_compare_and_set(app: Flask, client: FlaskClient, auth: Auth) -> None:
    _login_as(app, auth, "admin")
    assert _post(client, "/tasks/new", API_FORM).status_code == 303
    scheduler = _scheduler(app)
    original = scheduler.task_ops.get("billing")
    shown = _form_values(_text(client.get("/tasks/edit/billing")), "/tasks/edit/billing")
    assert shown["expected_updated_at"] == str(original.updated_at) and "id" not in shown
    saved = _post(client, "/tasks/edit/billing", {**shown, "name": "Billing v2", "cron": "0 3 * * *"})
    assert saved.status_code == 303
    changed = scheduler.task_ops.get("billing")
    assert (changed.name, changed.cron, changed.revision) == ("Billing v2", "0 3 * * *", original.revision + 1)
    assert changed.handler == original.handler and changed.params == original.params  # secrets kept
    [entry] = _audit(app, "task.update")
    assert (entry.before["name"], entry.after["name"]) == ("Nightly billing", "Billing v2")
    _assert_no_secret(json.dumps([entry.before, entry.after]))
    # The same form again carries the old updated_at: a conflict, and nothing changes.
    stale = _post(client, "/tasks/edit/billing", {**shown, "name": "Lost update"})
    assert stale.status_code == 303 and stale.headers["Location"].endswith("/tasks/edit/billing")
    assert "changed since the page was loaded" in _text(client.get("/tasks/edit/billing"))
    assert scheduler.task_ops.get("billing") == changed and len(_audit(app, "task.update")) == 1
    # A new secret value replaces the stored one; a missing version is refused.
    fresh = _form_values(_text(client.get("/tasks/edit/billing")), "/tasks/edit/billing")
    fresh["headers"] = fresh["headers"].replace("Authorization: ***", "Authorization: Bearer rotated")
    assert _post(client, "/tasks/edit/billing", fresh).status_code == 303
    handler = scheduler.task_ops.get("billing").handler
    assert handler is not None and handler["headers"]["Authorization"] == "Bearer rotated"
    no_version = _post(client, "/tasks/edit/billing", {k: v for k, v in fresh.items() if k != "expected_updated_at"})
    assert no_version.status_code == 400 and "missing the task's version" in html.unescape(_text(no_version))


def test_invalid_edit_stores_nothing(app: Flask, client: FlaskClient, auth: Auth) -> None:
    _login_as(app, auth, "admin")
    assert _post(client, "/tasks/new", API_FORM).status_code == 303
    before = _scheduler(app).task_ops.get("billing")
    shown = _form_values(_text(client.get("/tasks/edit/billing")), "/tasks/edit/billing")
    response = _post(client, "/tasks/edit/billing", {**shown, "cron": "every day", "name": "Renamed"})
    page = _text(response)
    assert response.status_code == 400 and "has 2 fields" in _field_error(page, "cron")
    assert 'value="Renamed"' in page  # what was typed is shown again ...
    _assert_no_secret(page)  # ... with the secrets still masked
    assert _scheduler(app).task_ops.get("billing") == before


# --- enable / disable / delete ------------------------------------------------------------------


def test_enable_disable_with_compare_and_set(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = _scheduler(app)
    task = scheduler.register(TaskDefinition(id="report", name="Report", cron="0 2 * * *"))
    _login_as(app, auth, "admin")
    assert "Disable" in _text(client.get("/tasks/view/report"))
    done = _post(client, "/tasks/disable/report", {"expected_updated_at": task.updated_at})
    assert done.status_code == 303
    disabled = scheduler.task_ops.get("report")
    assert not disabled.enabled
    [entry] = _audit(app, "task.disable")
    assert (entry.before["enabled"], entry.after["enabled"]) == (True, False)
    stale = _post(client, "/tasks/enable/report", {"expected_updated_at": task.updated_at})
    assert stale.status_code == 303
    assert "Nothing was changed" in _text(client.get("/tasks/view/report"))
    assert scheduler.task_ops.get("report") == disabled and _audit(app, "task.enable") == []
    assert _post(client, "/tasks/enable/report", {}).status_code == 400
    assert _post(client, "/tasks/enable/report", {"expected_updated_at": disabled.updated_at}).status_code == 303
    assert scheduler.task_ops.get("report").enabled and len(_audit(app, "task.enable")) == 1


def test_delete_with_confirmation_and_compare_and_set(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = _scheduler(app)
    task = scheduler.register(TaskDefinition(id="report", name="Report", cron="0 2 * * *"))
    _login_as(app, auth, "admin")
    confirm = _text(client.get("/tasks/delete/report"))
    assert f'name="expected_updated_at" value="{task.updated_at}"' in confirm
    assert "data-confirm=" not in confirm  # this page is the question: no dialog on top of it
    changed = scheduler.update_task("report", name="Changed meanwhile")
    stale = _post(client, "/tasks/delete/report", {"expected_updated_at": task.updated_at})
    assert stale.status_code == 303 and "Nothing was changed" in _text(client.get("/tasks/delete/report"))
    assert scheduler.task_ops.get("report") == changed and _audit(app, "task.delete") == []
    missing = _post(client, "/tasks/delete/report", {})
    assert missing.status_code == 400 and "missing the task's version" in html.unescape(_text(missing))
    deleted = _post(client, "/tasks/delete/report", {"expected_updated_at": changed.updated_at})
    assert deleted.status_code == 303 and deleted.headers["Location"].endswith("/tasks/")
    assert client.get("/tasks/view/report").status_code == 404
    [entry] = _audit(app, "task.delete")
    assert entry.before["name"] == "Changed meanwhile" and entry.after is None


# --- roles and CSRF ---------------------------------------------------------------------------------


def _every_post(app: Flask) -> list[tuple[str, dict[str, Any]]]:
    scheduler = _scheduler(app)
    task = scheduler.register(TaskDefinition(id="report", name="Report", cron="0 2 * * *"))
    scheduler.set_hooks({"on_task_execute": lambda event: "ok"})
    occurrence = scheduler.trigger("report").occurrence_id
    version = {"expected_updated_at": task.updated_at}
    return [("/tasks/new", {**API_FORM}), ("/tasks/edit/report", {**API_FORM, **version}),
            ("/tasks/enable/report", version), ("/tasks/disable/report", version), ("/tasks/delete/report", version),
            ("/tasks/trigger/report", {"idempotency_key": "k1"}),
            (f"/tasks/rerun/{occurrence}/report", {})]


def _unchanged(app: Flask) -> tuple[Any, ...]:
    scheduler = _scheduler(app)
    return ([row.task for row in scheduler.task_ops.search("").rows],
            [e.occurrence_id for e in scheduler.task_ops.occurrences("report").rows], audit_of(app).list())


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_roles_below_the_action_get_403(app: Flask, client: FlaskClient, auth: Auth, role: str) -> None:
    posts = _every_post(app)
    _login_as(app, auth, role)
    before = _unchanged(app)
    for path, data in posts:
        operator_action = path.startswith(("/tasks/trigger/", "/tasks/rerun/"))
        if role == "operator" and operator_action:
            continue
        assert _post(client, path, data).status_code == 403, path
    for path in ("/tasks/new", "/tasks/edit/report", "/tasks/delete/report"):
        assert client.get(path).status_code == 403, path
    assert _unchanged(app) == before
    detail = _text(client.get("/tasks/view/report"))
    assert "/tasks/disable/report" not in detail and "/tasks/delete/report" not in detail
    assert ("/tasks/trigger/report" in detail) == (role == "operator")


def test_posts_without_csrf_are_refused(app: Flask, client: FlaskClient, auth: Auth) -> None:
    posts = _every_post(app)
    _login_as(app, auth, "admin")
    before = _unchanged(app)
    for path, data in posts:
        response = _post(client, path, data, csrf=False)
        assert response.status_code == 400 and "form expired" in _text(response), path
    assert _unchanged(app) == before


# --- trigger, detail, rerun -------------------------------------------------------------------------


def test_trigger_returns_while_a_slow_hook_runs(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = _scheduler(app)
    entered, release = threading.Event(), threading.Event()

    def slow(event: Any) -> Any:
        entered.set()
        release.wait(30)
        return "done"

    scheduler.set_hooks({"on_task_execute": slow})
    scheduler.register(TaskDefinition(id="slow", name="Slow", cron="0 2 * * *"))
    _login_as(app, auth, "operator")
    try:
        response = _post(client, "/tasks/trigger/slow", {"idempotency_key": "2026-11-29", "source": ""})
        assert response.status_code == 303  # answered while the handler is still held
        assert entered.wait(10) and not release.is_set()
        [running] = scheduler.task_ops.occurrences("slow").rows
        assert (running.status, running.source, running.idempotency_key) == (
            "running", "dashboard:operator1", "2026-11-29")
        detail = _text(client.get("/tasks/view/slow"))
        assert "started: occurrence" in detail and 'hx-trigger="every 5s"' in detail and "badge-running" in detail
        fragment = _text(client.get("/tasks/occurrences/slow", headers={"HX-Request": "true"}))
        assert "<html" not in fragment and 'hx-trigger="every 5s"' in fragment
        busy = _post(client, "/tasks/trigger/slow", {"source": "second"})
        assert busy.status_code == 303 and "slot" in _text(client.get("/tasks/view/slow"))
        again = _post(client, "/tasks/trigger/slow", {"idempotency_key": "2026-11-29"})
        assert again.status_code == 303 and "already exists" in _text(client.get("/tasks/view/slow"))
    finally:
        release.set()
    wait_for_status(scheduler, running.occurrence_id, "success")
    rows = scheduler.task_ops.occurrences("slow").rows
    assert [r.status for r in rows] == ["skipped", "success"]
    assert 'hx-trigger="every 5s"' not in _text(client.get("/tasks/occurrences/slow",
                                                           headers={"HX-Request": "true"}))  # polling stops
    entries = _audit(app, "task.trigger")
    assert [(e.after["status"], e.after["existing"]) for e in reversed(entries)] == [
        ("running", False), ("skipped", False), ("running", True)]
    assert all(e.actor == "operator1" and e.target == "slow" for e in entries)


def test_trigger_bad_input_is_shown_next_to_the_field(app: Flask, client: FlaskClient, auth: Auth) -> None:
    _scheduler(app).register(TaskDefinition(id="report", name="Report", cron="0 2 * * *"))
    _login_as(app, auth, "operator")
    response = _post(client, "/tasks/trigger/report", {"idempotency_key": "k" * 129})
    assert response.status_code == 400 and "at most 128 characters" in _text(response)
    with_nul = _post(client, "/tasks/trigger/report", {"idempotency_key": "a\x00b"})
    assert with_nul.status_code == 400 and "must not contain NUL" in _text(with_nul)
    assert _scheduler(app).task_ops.occurrences("report").rows == [] and _audit(app, "task.trigger") == []
    assert _post(client, "/tasks/trigger/missing", {}).status_code == 404


def test_rerun_from_history(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = _scheduler(app)
    scheduler.set_hooks({"on_task_execute": lambda event: "ok"})
    scheduler.register(TaskDefinition(id="report", name="Report", cron="0 2 * * *"))
    scheduler.register(TaskDefinition(id="other", name="Other", cron="0 2 * * *"))
    first = scheduler.trigger("report").occurrence_id
    elsewhere = scheduler.trigger("other").occurrence_id
    _login_as(app, auth, "operator")
    detail = _text(client.get("/tasks/view/report"))
    assert f"/tasks/rerun/{first}/report" in detail and f'id="occ-{first}"' in detail
    assert _post(client, f"/tasks/rerun/{first}/report", {}).status_code == 303
    newest = scheduler.task_ops.occurrences("report").rows[0]
    assert newest.occurrence_id != first and newest.source == f"rerun:{first}"
    wait_for_status(scheduler, newest.occurrence_id, "success")
    [entry] = _audit(app, "task.rerun")
    assert entry.before == {"occurrence_id": first, "status": "success"}
    assert entry.after["occurrence_id"] == newest.occurrence_id
    assert _post(client, f"/tasks/rerun/{elsewhere}/report", {}).status_code == 404
    assert _post(client, "/tasks/rerun/nope/report", {}).status_code == 404
    assert len(scheduler.task_ops.occurrences("report").rows) == 2


def test_detail_shows_definition_next_runs_and_history_pages(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = _scheduler(app)
    scheduler.set_hooks({"on_task_execute": lambda event: "ok"})
    scheduler.register(TaskDefinition(id="report", name="Report", cron="0 6 * * *", timezone="America/New_York",
                                      params={"api_token": "p4ram-token"}))
    made = [scheduler.trigger("report").occurrence_id for _ in range(27)]
    _login_as(app, auth, "viewer")
    page = _text(client.get("/tasks/view/report"))
    assert page.count(" 06:00 E") == 5 and "America/New_York" in page  # five next runs in the task's zone
    assert '"api_token": "***"' in html.unescape(page)
    _assert_no_secret(page)
    assert made[-1] in page and made[2] in page and made[1] not in page  # 25 newest on the first page
    older = re.search(r'href="(/tasks/view/report\?before=[^"#]+)', page)
    assert older is not None
    second = _text(client.get(older.group(1).replace("&amp;", "&")))
    assert made[1] in second and made[0] in second and made[2] not in second
    assert client.get("/tasks/view/report?before=garbage").status_code == 400
    assert client.get("/tasks/view/missing").status_code == 404


def test_api_task_runs_against_a_real_server_when_triggered(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = _scheduler(app)
    with RecordingServer() as server:
        _login_as(app, auth, "admin")
        form = {**API_FORM, "url": server.url("/echo"), "body": '{"amount": 42}', "timeout": "10000"}
        assert _post(client, "/tasks/new", form).status_code == 303
        assert _post(client, "/tasks/trigger/billing", {"source": "browser"}).status_code == 303
        [occurrence] = scheduler.task_ops.occurrences("billing").rows
        done = wait_for_status(scheduler, occurrence.occurrence_id, "success")
        [received] = server.requests
        assert received.method == "POST" and received.json() == {"amount": 42}
        assert received.header("Authorization") == "Bearer s3cr3t-header"  # the stored value, not the mask
        assert received.header("Idempotency-Key") == occurrence.occurrence_id
        assert done.attempts[-1].result == {"amount": 42}
    detail = _text(client.get("/tasks/view/billing"))
    assert "badge-success" in detail and "browser" in detail
    _assert_no_secret(detail)


# --- state, pause and resume --------------------------------------------------------------------------


def test_an_operator_pauses_with_a_reason_and_resumes_audited(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = _scheduler(app)
    scheduler.register(TaskDefinition(id="report", name="Report", cron="0 2 * * *"))
    _login_as(app, auth, "operator")
    assert "badge-state-ok" in _text(client.get("/tasks/"))
    missing = _post(client, "/tasks/pause/report", {"reason": " ", "minutes": ""})
    assert missing.status_code == 400 and "Say why it is paused" in _text(missing)
    too_long = _post(client, "/tasks/pause/report", {"reason": "deploy", "minutes": "99999"})
    assert too_long.status_code == 400 and "1 to 10080" in _text(too_long)
    assert scheduler.task_state("report").state == "ok" and _audit(app, "task.pause") == []
    assert _post(client, "/tasks/pause/report", {"reason": "deploy <b>v2</b>", "minutes": "30"}).status_code == 303
    page = _text(client.get("/tasks/view/report"))
    assert "state-banner-paused" in page and "by operator1" in page and "deploy &lt;b&gt;v2&lt;/b&gt;" in page
    assert "badge-state-paused" in _text(client.get("/tasks/"))
    state = scheduler.task_state("report")
    assert state.state == "paused" and state.paused is not None and state.paused.until is not None
    [entry] = _audit(app, "task.pause")
    assert (entry.actor, entry.reason, entry.after["paused_by"]) == ("operator1", "deploy <b>v2</b>", "operator1")
    assert _post(client, "/tasks/resume/report", {}).status_code == 303
    assert scheduler.task_state("report").state == "ok"
    assert "state-banner" not in _text(client.get("/tasks/view/report"))
    [resumed] = _audit(app, "task.resume")
    assert resumed.before == {"paused_by": "operator1", "reason": "deploy <b>v2</b>"}


def test_a_blocked_task_shows_what_blocks_it(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = _scheduler(app)
    scheduler.register(TaskDefinition(id="stuck", name="Stuck", cron="* * * * *"))
    holder = abandon_running_execution(app.extensions["hai_engine"], "stuck", started=True)
    scheduler.execution.get(holder)
    _settle_as_unknown(app, holder)
    auth.login()
    page = _text(client.get("/tasks/view/stuck"))
    assert "state-banner-blocked" in page and holder in page and 'href="/executions/unknown?task=' in page
    assert "badge-state-blocked" in _text(client.get("/tasks/"))


def test_pausing_a_paused_task_from_a_stale_page_says_so(app: Flask, client: FlaskClient, auth: Auth) -> None:
    """The page a second pause came from is stale: the paused task's page shows no pause form, so
    an error next to its fields could not be seen (it answered 400 with no message)."""
    scheduler = _scheduler(app)
    scheduler.register(TaskDefinition(id="report", name="Report", cron="0 2 * * *"))
    _login_as(app, auth, "operator")
    assert _post(client, "/tasks/pause/report", {"reason": "deploy"}).status_code == 303
    paused = scheduler.task_ops.get("report")
    for form in ({"reason": "again"}, {"reason": "a\x00b"}, {"reason": "x", "minutes": "9" * 40}):
        again = _post(client, "/tasks/pause/report", form)
        assert again.status_code == 303 and again.headers["Location"].endswith("/tasks/view/report")
        assert "is already paused" in _text(client.get("/tasks/view/report"))
    assert scheduler.task_ops.get("report") == paused and len(_audit(app, "task.pause")) == 1


def test_a_viewer_cannot_pause(app: Flask, client: FlaskClient, auth: Auth) -> None:
    _scheduler(app).register(TaskDefinition(id="report", name="Report", cron="0 2 * * *"))
    _login_as(app, auth, "viewer")
    assert _post(client, "/tasks/pause/report", {"reason": "x"}).status_code == 403
    assert 'action="/tasks/pause/report"' not in _text(client.get("/tasks/view/report"))
    assert _scheduler(app).task_state("report").state == "ok"


def _settle_as_unknown(app: Flask, occurrence_id: str) -> None:
    """The dead owner's lease runs out and the node's expiry scan isolates the run as unknown."""
    scheduler = _scheduler(app)
    execution = scheduler.execution.get(occurrence_id)
    repo = scheduler.context().executions
    set_clock_offset(app.extensions["hai_engine"], clock_offset(app.extensions["hai_engine"]) + 5_000)
    assert repo.mark_unknown(execution, "lease_expired", list(execution.attempts))
