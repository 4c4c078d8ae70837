"""No 500, ever: every form field of every POST route, walked from ``app.url_map``, gets
generated malformed values -- huge integers, 40-digit numbers, NUL, lone surrogates (sent as
the bytes a broken client would send), very long strings, CR/LF, unicode digits and marks --
posted by a signed-in admin with a valid CSRF token. Every answer must be a redirect (3xx) or a
4xx that shows a message; never a 500 or an exception. On SQLite, PostgreSQL and MariaDB.

The fields a route reads are listed here (FIELDS) and checked against the forms the pages
render, so a new route or field fails here until it is listed. The search is derandomized
(hypothesis takes its seed from the test); ``HAI_INPUT_EXAMPLES`` runs a longer one.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from html.parser import HTMLParser
from urllib.parse import quote, urlencode

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.routing import Rule
from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from tests.webapp.api_support import queued_row
from tests.webapp.conftest import Auth, csrf_token
from webapp.node import accounts_of, reach_of, scheduler_of

EXAMPLES = int(os.environ.get("HAI_INPUT_EXAMPLES", "12"))  # per route
DEAD_ID = "7d4e1d9a-2f43-4a8e-9d1b-9a6a1c2b3d4e"  # a dead letter (requeue) and an unknown delivery (resolve)
UNKNOWN_ID = "5c0e6f1b-8a2d-4e6b-b3f1-0d9e8c7b6a54"
Baseline = Callable[["World"], str]
Field = Baseline | str | None  # None: the field is not sent (an unchecked box)

# Every value here broke, or could break, a parser somewhere: each field gets each of them once.
MALFORMED = ("9" * 40, str(2**63), str(-(2**63)), "\x00", "a\x00b", "\ud800", "x\udfff", "a" * 70_000, "a\r\nb",
             "\r\n", "ü\U0001d49c\u202e", "²", "٣", "1e309", "NaN", "-0", " 7 ", "", '{"a":' * 40, "%00",
             "//evil.example", "../..", "\\\\evil")
VALUES = st.one_of(st.sampled_from(MALFORMED), st.text(max_size=30), st.integers().map(str),
                   st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
                   st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=200, max_size=2_000),
                   st.sampled_from(("\ud800", "\udfff")).map(lambda s: f"a{s}b"))


def _version(read: Callable[[World], int]) -> Baseline:
    return lambda world: str(read(world))


STALE = "1"  # a version no row has: the change is refused after the form is parsed
TASK_FORM: dict[str, Field] = {
    "id": "fuzz", "name": "Fuzz", "description": "", "cron": "0 3 * * *", "timezone": "UTC", "kind": "hook",
    "retry_max_attempts": "1", "retry_backoff": "", "params": "", "url": "", "method": "POST", "headers": "",
    "body": "", "timeout": "", "enabled": "1", "idempotent": None, "delete_after_run": None,  # None: unchecked
    "node_group": "", "catchup_policy": "none", "catchup_window_ms": "3600000", "runbook_url": "",
    "overlap_policy": "skip", "overlap_buffer_limit": "10", "pause_on_failure": "", "max_runs": "", "jitter_ms": "",
    "owner": "", "calendar_from": "", "calendar_until": "", "calendar_exclude": "", "team": "default",
}
TASK_VERSION = _version(lambda w: scheduler_of(w.app).task_ops.get(w.task_of(w.endpoint)).updated_at)
USER_VERSION = _version(lambda w: getattr(accounts_of(w.app).get("walk"), "updated_at", 1))
EXECUTION_VERSION = _version(lambda w: scheduler_of(w.app).execution.get(w.occurrence).updated_at)
ALERT_VERSION = _version(lambda w: reach_of(w.app).alerts.stored_versions().get("walk", 1))
ALERT_RULE: dict[str, Field] = {"events": "execution.failed", "template": "walk-alert", "to": "ops@example.com",
                                "provider": "", "tasks": "", "node_group": "", "throttle_s": "600", "after_min": "10",
                                "bypass_dnd": None, "team": ""}
WALK_RULE = {"name": "walk", "events": ["execution.failed"], "template": "walk-alert", "to": "ops@example.com"}
TEMPLATE_VERSION = _version(lambda w: getattr(reach_of(w.app).templates.stored_one("walk-tpl"), "updated_at", 1))

# endpoint -> {field: the value it has when another field is the malformed one}
FIELDS: dict[str, dict[str, Field]] = {
    "auth.login": {"username": "admin", "password": "wrong password", "next": "/tasks/"},
    "tasks.create": TASK_FORM,
    "tasks.update": {**TASK_FORM, "expected_updated_at": TASK_VERSION},
    "tasks.enable": {"expected_updated_at": TASK_VERSION},
    "tasks.disable": {"expected_updated_at": TASK_VERSION},
    "tasks.delete": {"expected_updated_at": STALE},
    "tasks.trigger": {"idempotency_key": "", "source": ""},
    "tasks.rerun": {},
    "tasks.pause": {"reason": "fuzzing", "minutes": "5", "until": "", "until_tz": "UTC"},
    "tasks.resume": {},
    "backfill.submit": {"start": "2026-01-01T00:00", "end": "2026-01-01T06:00", "tz": "", "reason": "",
                        "action": "queue"},
    "executions.resolve": {"status": "success", "reason": "checked", "expected_updated_at": EXECUTION_VERSION},
    "executions.bulk_resolve": {"task": "", "cause": "", "bound_at": "0", "bound_id": "", "count": "0",
                                "status": "discarded", "reason": "checked"},
    "logs.repair": {},
    "logs.repair_all": {},
    "notifications.requeue": {"expected_updated_at": STALE},
    "notifications.bulk_requeue": {"provider": "", "failure": "", "template": "", "bound_at": "0", "bound_id": "",
                                   "count": "0"},
    "notifications.resolve": {"status": "sent", "reason": "checked", "message_id": "", "expected_updated_at": STALE},
    "notifications.create_template": {"name": "fuzz-tpl", "provider": "log", "subject": "", "body": "Hi {who}"},
    "notifications.update_template": {"provider": "log", "subject": "", "body": "Hi {who}",
                                      "expected_updated_at": TEMPLATE_VERSION},
    "notifications.delete_template": {"expected_updated_at": STALE},
    "alerts.create_rule": {"name": "fuzz-rule", **ALERT_RULE},
    "alerts.update_rule": {**ALERT_RULE, "expected_updated_at": ALERT_VERSION},
    "alerts.delete_rule": {"expected_updated_at": STALE},
    "alerts.test_rule": {},
    "users.create": {"name": "fuzz-user", "role": "viewer", "password": "fuzz-password-1",
                     "confirm": "fuzz-password-1"},
    "users.set_role": {"role": "operator", "expected_updated_at": USER_VERSION},
    "users.set_team_role": {"team": "default", "role": "operator", "expected_updated_at": USER_VERSION},
    "users.disable": {"expected_updated_at": USER_VERSION},
    "users.enable": {"expected_updated_at": USER_VERSION},
    "users.reset_password": {"password": "walk-password-2", "confirm": "walk-password-2",
                             "expected_updated_at": USER_VERSION},
    "user_tokens.create": {"name": "fuzz-token", "expires_days": "30"},
    "user_tokens.revoke": {},
    "teams.create": {"team": "fuzz-team", "name": "Fuzz team"},
    "teams.rename": {"name": "Renamed"},
    "teams.delete": {},
}
# The JSON API (bearer tokens, JSON bodies, no CSRF) is not a form: tests/webapp/test_api_fuzz.py
# sends junk to each of its writes instead.
API_PREFIX = "api."
CSRF_PAGE = "This form expired or was not sent from this dashboard"
NOT_POSTED = {"auth.logout": "no field; it would end the admin's session that every other post uses"}
MESSAGE = re.compile(r'class="field-error"[^>]*>\s*[^<\s]|class="flash flash-error"[^>]*>\s*[^<\s]'
                     r'|data-error-message>\s*[^<\s]')


WALK = TaskDefinition(id="walk", name="Walk", cron="0 2 * * *", handler={"kind": "hook"})
EDITED = "walk-edit"  # the task the edit form changes: never triggered, so delete_after_run never deletes it
WALK_TEAM = "walk-team"  # the team the rename and delete forms name


@dataclass
class World:
    app: Flask
    admin: FlaskClient
    anonymous: FlaskClient
    occurrence: str
    tokens: dict[bool, str]  # CSRF tokens: True for the anonymous client, False for the admin's
    endpoint: str = ""  # the route being posted

    def task_of(self, endpoint: str) -> str:
        return EDITED if endpoint == "tasks.update" else "walk"

    def path_values(self) -> dict[str, str]:
        return {"task_id": self.task_of(self.endpoint), "occurrence_id": self.occurrence,
                "queue_id": UNKNOWN_ID if self.endpoint == "notifications.resolve" else DEAD_ID,
                "name": "walk-tpl" if self.endpoint.startswith("notifications.") else "walk",
                "log_id": str(uuid.uuid4()), "token_id": str(uuid.uuid4()), "team_id": WALK_TEAM}

    def restore(self) -> None:
        """The rows the routes name, as the posts before may have left them: "walk" resumed (a
        paused task's page has no pause form), and registered again if a post deleted it; the
        stored alert rule "walk" and the team "walk-team" likewise."""
        scheduler = scheduler_of(self.app)
        stored = {task.id: task for task in scheduler.refresh_tasks()}
        if "walk" not in stored:
            scheduler.register(WALK)
        elif stored["walk"].paused:
            scheduler.resume("walk")
        alerts = reach_of(self.app).alerts
        if "walk" not in alerts.stored_versions():
            alerts.save_rule(WALK_RULE)
        accounts = accounts_of(self.app)
        if WALK_TEAM not in accounts.teams():
            accounts.create_team(WALK_TEAM, "Walk team")


@pytest.fixture
def world(db_app: Flask) -> World:
    scheduler = scheduler_of(db_app)
    scheduler.set_hooks({"on_task_execute": lambda event: "ok"})
    scheduler.register(WALK)
    scheduler.register(replace(WALK, id=EDITED))
    occurrence = scheduler.trigger("walk").occurrence_id
    accounts_of(db_app).create("walk", "viewer", generate_password_hash("walk-password-1"))
    accounts_of(db_app).create_team(WALK_TEAM, "Walk team")
    reach_of(db_app).templates.create("walk-tpl", "log", "Hi {who}")
    reach_of(db_app).templates.create("walk-alert", "log", "{summary} {link}")
    reach_of(db_app).alerts.save_rule(WALK_RULE)
    queued_row(db_app.extensions["hai_engine"], "dead", DEAD_ID)
    queued_row(db_app.extensions["hai_engine"], "unknown", UNKNOWN_ID)
    admin = db_app.test_client()
    assert Auth(admin).login().status_code == 302
    anonymous = db_app.test_client()
    return World(db_app, admin, anonymous, occurrence, {True: csrf_token(anonymous), False: csrf_token(admin, "/")})


def _posts(app: Flask) -> list[Rule]:
    return [rule for rule in app.url_map.iter_rules()
            if "POST" in (rule.methods or ()) and not rule.endpoint.startswith(API_PREFIX)]


def _path(rule: Rule, values: dict[str, str], fuzzed: dict[str, str]) -> str:
    """The route's path; a fuzzed argument goes in as the bytes a client would send (quoted)."""
    path = rule.rule
    for name in rule.arguments:
        value = fuzzed.get(name, values.get(name, "walk"))
        raw = value.encode("utf-8", "surrogatepass")
        safe = "/" if f"<path:{name}>" in path else ""
        path = re.sub(rf"<(\w+:)?{name}>", lambda _m, r=raw, s=safe: quote(r, safe=s), path)
    return path


def _encoded(form: dict[str, str]) -> bytes:
    """An urlencoded body; lone surrogates travel as their WTF-8 bytes, as a broken client sends them."""
    return urlencode([(k, v.encode("utf-8", "surrogatepass")) for k, v in form.items()]).encode("ascii")


def _post(world: World, rule: Rule, form: dict[str, str], path_args: dict[str, str]) -> str | None:
    """Post once; the problem with the answer, or None."""
    public = rule.endpoint == "auth.login"
    client = world.anonymous if public else world.admin
    token = world.tokens[public]
    world.endpoint = rule.endpoint
    world.restore()
    path = _path(rule, world.path_values(), path_args)
    try:
        response = client.post(path, data=_encoded({**form, "csrf_token": token}),
                               content_type="application/x-www-form-urlencoded")
    except Exception as exc:  # TESTING propagates what would be a 500
        return f"raised {type(exc).__name__}: {exc!s:.300}"
    status, body = response.status_code, response.get_data(as_text=True)
    if CSRF_PAGE in body:
        return "refused the CSRF token: the test lost its session"
    if 300 <= status < 400:
        return None
    if status == 404 and not path_args:
        return f"answered 404: the rows the route names are gone (fix World.restore): {body[:300]!r}"
    if 400 <= status < 500 and status != 405 and MESSAGE.search(body):
        return None
    return f"answered {status}{' without a message' if 400 <= status < 500 else ''}: {body[:300]!r}"


def _baseline(world: World, endpoint: str) -> dict[str, str]:
    world.endpoint = endpoint
    return {name: value(world) if callable(value) else value for name, value in FIELDS[endpoint].items()
            if value is not None}


def _shown(form: dict[str, str]) -> str:
    return ", ".join(f"{k}={v[:40]!r}{'...' if len(v) > 40 else ''}" for k, v in form.items())


def test_every_post_route_lists_its_fields(db_app: Flask) -> None:
    endpoints = {rule.endpoint for rule in _posts(db_app)}
    unlisted = sorted(endpoints - set(FIELDS) - set(NOT_POSTED))
    assert not unlisted, f"POST routes without their fields in FIELDS: {unlisted}"
    assert not set(FIELDS) - endpoints, f"FIELDS names routes that are gone: {sorted(set(FIELDS) - endpoints)}"


class _Forms(HTMLParser):
    """The POST forms of a page: action -> the names of its fields."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: dict[str, set[str]] = {}
        self._action: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and a.get("method", "").lower() == "post":
            self._action = a.get("action", "")
            self.forms.setdefault(self._action, set())
        elif tag in ("input", "select", "textarea") and self._action is not None and a.get("name"):
            self.forms[self._action].add(a["name"])

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._action = None


def test_the_pages_forms_post_only_listed_fields(world: World) -> None:
    pages = ["/tasks/new", "/tasks/view/walk", "/tasks/edit/walk", "/tasks/delete/walk", "/logs/failures",
             "/notifications/templates/new", "/notifications/templates/show/walk-tpl",
             "/notifications/templates/edit/walk-tpl", "/users/new", "/users/manage/walk", "/notifications/alerts/",
             "/notifications/alerts/rules/new", "/notifications/alerts/rules/edit/walk", "/tasks/backfill/walk",
             "/teams/", "/"]
    adapter = world.app.url_map.bind("localhost")
    seen = set()
    for page in pages:
        parser = _Forms()
        parser.feed(world.admin.get(page).get_data(as_text=True))
        for action, names in parser.forms.items():
            endpoint, _ = adapter.match(action, method="POST")
            seen.add(endpoint)
            extra = names - {"csrf_token"} - set(FIELDS.get(endpoint, {}))
            assert not extra, f"{page}: the form of {endpoint} posts fields FIELDS does not list: {sorted(extra)}"
    assert len(seen) >= 12, f"too few forms found: {sorted(seen)}"


def test_malformed_values_in_every_field_never_answer_500(world: World) -> None:
    """Each listed malformed value in each field (the others valid), and in each URL argument."""
    problems = []
    for rule in _posts(world.app):
        if rule.endpoint in NOT_POSTED:
            continue
        for field in [*FIELDS[rule.endpoint], *(f"<{arg}>" for arg in rule.arguments)]:
            for value in MALFORMED:
                form = _baseline(world, rule.endpoint)
                path_args = {}
                if field.startswith("<"):
                    path_args[field.strip("<>")] = value
                else:
                    form[field] = value
                problem = _post(world, rule, form, path_args)
                if problem:
                    problems.append(f"POST {rule.rule} {field}={value[:40]!r}: {problem}")
    assert not problems, "\n".join(problems[:40])


def _search(world: World, rule: Rule, problems: list[str]) -> None:
    """Hypothesis fills any subset of the route's fields with generated values (the rest valid)."""
    fields = FIELDS[rule.endpoint]

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.fixed_dictionaries({name: st.one_of(st.none(), VALUES) for name in fields}))
    def check(generated: dict[str, str | None]) -> None:
        form = _baseline(world, rule.endpoint)
        form.update({name: value for name, value in generated.items() if value is not None})
        problem = _post(world, rule, form, {})
        if problem:
            problems.append(f"POST {rule.rule} {_shown(form)}: {problem}")

    check()


def test_generated_forms_never_answer_500(world: World) -> None:
    problems: list[str] = []
    for rule in _posts(world.app):
        if rule.endpoint not in NOT_POSTED and FIELDS[rule.endpoint]:
            _search(world, rule, problems)
    assert not problems, "\n".join(problems[:40])
