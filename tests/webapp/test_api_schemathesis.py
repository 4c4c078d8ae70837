"""The API against its own OpenAPI document, fuzzed by schemathesis: every operation, with an
admin's token and a viewer's, on the real server (``hai-scheduler serve``: gunicorn's gthread
workers, on 127.0.0.1) over PostgreSQL. Every schemathesis check runs, in the examples, coverage
and fuzzing phases per operation and in a stateful run that follows the document's links (a
created task read, changed, paused, triggered, deleted, then read again). A failing check fails
the test with schemathesis's own report and a curl line to reproduce it.

The few places where the document cannot say what the server does are configured below, each
with its reason, never by turning a check off:

- ``positive_data_acceptance`` (a request the document allows is not refused): a few values have
  rules no JSON Schema holds -- a cron expression, an IANA time zone, a handler's settings, the
  task search's ``field:value`` language, a backfill's range (past, in order, at most 1,000 fire
  times) -- so those operations may answer 422 to a request the
  document allows (``SEMANTIC``); and a request line longer than gunicorn reads (4094 bytes)
  is 414 whatever the document allows, as percent-encoded values of the longest lengths it
  allows can make one.
- ``negative_data_rejection`` (a request the document refuses is refused): 413 and 414 are
  refusals too (schemathesis's default list omits them).
- ``before`` and ``after`` of the journal's lists exclude each other, which OpenAPI's parameters
  cannot express (the document says it in words): a query holding both is not asked to be
  accepted (``positive_data_acceptance``); every other check runs on it.
- ``/tasks/{task_id}`` takes ids holding ``/``, so ``PATCH /tasks/pause/x`` is the documented
  ``PATCH /tasks/{task_id}`` of task ``pause/x``, not an undeclared method of
  ``/tasks/pause/{task_id}``, and ``OPTIONS`` there lists both paths' methods:
  ``unsupported_method`` and ``allow_header_conformance`` are not asked of another method than
  the operation's own on those four action paths.
- A "negative" case whose invalid parts never reach the server as invalid is not asked to be
  refused (``negative_data_rejection``): its Authorization header (this test always sends the
  role's real token instead) and query values that are one-element lists whose one value the
  document allows (``?before=1`` is the same request line whether ``before`` was ``"1"`` or
  ``[1]``), or values the client leaves out of the request line (None, an empty list). Found by
  this test: ``GET /tasks?before=1`` with a token, answered 200, was reported as
  "schema-violating request accepted" (5 Dec 2026), and so was ``GET /executions?task_id=U2o0``
  (7 Dec), whose other parameter, of a negative value requests does not send, was not sent.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import hypothesis
import pytest
import requests
import schemathesis
from jsonschema import Draft202012Validator
from schemathesis.checks import load_all_checks
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    unsupported_method,
)
from werkzeug.security import generate_password_hash

from scheduler_core.db import close_engine, create_engine, upgrade
from scheduler_core.runtime.accounts import Accounts
from scheduler_core.runtime.api_tokens import ApiTokens
from tests.conftest import create_database, drop_database, server
from tests.helpers.served import serve
from webapp.api.openapi import document

pytestmark = pytest.mark.slow
MAX_EXAMPLES = 25  # per operation and phase: about 1,500 requests per role, within a minute or two here
SEMANTIC = ("create_task", "update_task", "list_tasks", "backfill_task")  # backfill: a past range, capped
REFUSALS = ["400", "401", "403", "404", "405", "406", "409", "413", "414", "415", "422", "428", "429"]
ACCEPTANCES = ["2xx", "401", "403", "404", "409", "414", "429"]
ACTION_PATHS = re.compile(r"^/api/v1/tasks/(?:pause|resume|trigger|backfill)/\{task_id\}$")

# Every check schemathesis has: a new one in a later version runs here too.
load_all_checks()


@dataclass(frozen=True)
class Served:
    base: str
    tokens: dict[str, str]


def _seed(url: str) -> dict[str, str]:
    """The schema, an admin and a viewer, a token each."""
    engine = create_engine(url)
    try:
        upgrade(engine)
        accounts, tokens = Accounts(engine), ApiTokens(engine)
        accounts.create("admin", "admin", generate_password_hash("fuzz-admin-password"))
        accounts.create("viewer1", "viewer", generate_password_hash("fuzz-viewer-password"))
        return {"admin": tokens.create("admin", "fuzz").secret, "viewer": tokens.create("viewer1", "fuzz").secret}
    finally:
        close_engine(engine)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server("postgresql")
    url = create_database("postgresql")
    try:
        tokens = _seed(url)
        cwd = tmp_path_factory.mktemp("served")
        env = {"HAI_DATABASE_URL": url, "HAI_SECRET_KEY": "fuzz-" + "k" * 40, "HAI_API_RATE_LIMIT": "1000000",
               "HAI_THREADS": "4"}
        with serve(cwd, env, workers=2) as base:
            yield Served(base, tokens)
    finally:
        drop_database("postgresql", url)


def _config() -> schemathesis.Config:
    expected = {"positive_data_acceptance": {"expected-statuses": ACCEPTANCES},
                "negative_data_rejection": {"expected-statuses": REFUSALS}}
    semantic = {"positive_data_acceptance": {"expected-statuses": [*ACCEPTANCES, "422"]}}
    return schemathesis.Config.from_dict({
        "checks": expected,
        "generation": {"max-examples": MAX_EXAMPLES, "database": "none"},
        "phases": {"examples": {"enabled": True}, "coverage": {"enabled": True}, "fuzzing": {"enabled": True},
                   "stateful": {"enabled": True, "max-steps": 8}},
        "operations": [{"include-operation-id": operation, "checks": semantic} for operation in SEMANTIC],
    })


# The document the server publishes, generated from the same code at import (schemathesis makes
# a test per operation when the module is collected, before any server runs); the first test
# checks that the served one is this one.
schema = schemathesis.openapi.from_dict(document(), config=_config())


@pytest.fixture(params=["admin", "viewer"])
def authorization(request: pytest.FixtureRequest, served: Served) -> dict[str, str]:
    return {"Authorization": f"Bearer {served.tokens[request.param]}"}


def test_the_served_document_is_the_one_fuzzed(served: Served) -> None:
    answer = requests.get(f"{served.base}/api/v1/openapi.json", timeout=30)
    assert answer.status_code == 200 and answer.json() == document()


def test_a_request_line_too_long_is_a_problem(served: Served) -> None:
    """gunicorn refuses a request line over 4094 bytes before the app sees it: with a problem (the
    worker class in webapp/gunicorn_worker.py), not gunicorn's HTML page."""
    answer = requests.get(f"{served.base}/api/v1/tasks?q={'a' * 5_000}", timeout=30,
                          headers={"Authorization": f"Bearer {served.tokens['viewer']}"})
    assert answer.status_code == 414 and answer.headers["Content-Type"] == "application/problem+json", answer.text
    problem = answer.json()
    assert problem["status"] == 414 and problem["code"] == "hai:api:414" and "4094" in problem["detail"], problem


def _not_asked(case: Any) -> list[Any]:
    """The checks a case is not asked to pass, each for the reason the module docstring gives."""
    excluded = []
    if ACTION_PATHS.match(case.path) and case.method.upper() != case.operation.method.upper():
        excluded += [unsupported_method, allow_header_conformance]  # /tasks/{task_id}, its id holding /
    if case.query and "before" in case.query and "after" in case.query:
        excluded.append(positive_data_acceptance)  # the two cursors exclude each other
    if _void_negative(case):
        excluded.append(negative_data_rejection)  # its invalid parts are never sent as invalid
    return excluded


def _void_negative(case: Any) -> bool:
    """A negative case whose only negative components are its headers, holding no more than an
    Authorization header (replaced by the role's token when sent), and its query, whose values
    are each the document's (a one-element list sent as its one value)."""
    meta = getattr(case, "meta", None)
    if meta is None or meta.generation.mode != GenerationMode.NEGATIVE:
        return False
    negative = {location for location, info in meta.components.items() if info.mode == GenerationMode.NEGATIVE}
    for location in negative:
        if location == ParameterLocation.HEADER:
            if {name.lower() for name in (case.headers or {})} - {"authorization"}:
                return False
        elif location == ParameterLocation.QUERY:
            sent = case.as_transport_kwargs(base_url="http://127.0.0.1").get("params") or {}  # as serialised
            if not _query_as_documented(sent, _query_schemas(case.operation.definition.raw)):
                return False
        else:
            return False
    return bool(negative)


def _query_schemas(operation: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p.get("schema", {}) for p in operation.get("parameters", []) if p.get("in") == "query"}


def _query_as_documented(query: dict[str, Any], schemas: dict[str, dict[str, Any]]) -> bool:
    """Every parameter of the request line that ``query`` makes (as requests, schemathesis's
    transport, writes it: a one-element list as its value, None and empty lists left out) is
    named once and has a value its parameter's schema allows (as text, or as the number it reads as)."""
    line = requests.Request("GET", "http://127.0.0.1/", params=query).prepare().url or ""
    sent = parse_qsl(urlsplit(line).query, keep_blank_values=True)
    names = [name for name, _ in sent]
    if len(set(names)) != len(names):
        return False
    for name, text in sent:
        if name not in schemas:
            return False
        readings: list[Any] = [text] + ([int(text)] if re.fullmatch(r"-?[0-9]+", text) else [])
        if not any(Draft202012Validator(schemas[name]).is_valid(reading) for reading in readings):
            return False
    return True


def test_a_negative_case_whose_invalid_parts_are_never_sent_is_not_asked_to_be_refused() -> None:
    schemas = {"before": {"anyOf": [{"type": "string", "minLength": 1, "maxLength": 128}, {"type": "null"}]},
               "limit": {"type": "integer", "minimum": 1, "maximum": 100}}
    assert _query_as_documented({"before": [1]}, schemas)  # sent as before=1
    assert _query_as_documented({"before": "x", "limit": 5}, schemas)
    assert not _query_as_documented({"before": [1, 2]}, schemas)  # before=1&before=2
    assert not _query_as_documented({"before": ""}, schemas)
    assert not _query_as_documented({"limit": [500]}, schemas)
    assert not _query_as_documented({"limit": "x"}, schemas)
    assert not _query_as_documented({"unknown": "1"}, schemas)
    assert _query_as_documented({"before": {"a": 1}}, schemas)  # requests sends a mapping's keys: before=a
    assert not _query_as_documented({"limit": {"a": 1}}, schemas)
    # Not in the request line at all (requests drops them): found on 7 Dec 2026, GET
    # /executions?task_id=U2o0 reported as "schema-violating request accepted".
    assert _query_as_documented({"before": "x", "limit": None}, schemas)
    assert _query_as_documented({"limit": [], "before": "x", "after": {}}, schemas)
    assert not _query_as_documented({"limit": [None, 500]}, schemas)


def _call_and_validate(case: Any, served: Served, role: str) -> None:
    case.call_and_validate(base_url=served.base, headers={"Authorization": f"Bearer {served.tokens[role]}"},
                           excluded_checks=_not_asked(case))


@schema.parametrize()
@hypothesis.settings(deadline=None, suppress_health_check=list(hypothesis.HealthCheck))
def test_every_operation_keeps_to_the_document_for_an_admin(case: Any, served: Served) -> None:
    _call_and_validate(case, served, "admin")


@schema.parametrize()
@hypothesis.settings(deadline=None, suppress_health_check=list(hypothesis.HealthCheck))
def test_every_operation_keeps_to_the_document_for_a_viewer(case: Any, served: Served) -> None:
    _call_and_validate(case, served, "viewer")


def test_linked_operations_keep_to_the_document(served: Served, authorization: dict[str, str]) -> None:
    machine = schema.as_state_machine()
    started = time.monotonic()

    class Workflow(machine):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": served.base, "headers": authorization}

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any) -> None:
            case.validate_response(response, additional_checks=additional_checks, excluded_checks=_not_asked(case),
                                   transport_kwargs=kwargs or None, recorder=self.recorder)

    Workflow.run(settings=hypothesis.settings(max_examples=MAX_EXAMPLES, deadline=None, stateful_step_count=8,
                                              suppress_health_check=list(hypothesis.HealthCheck),
                                              database=None))
    assert time.monotonic() - started < 240
