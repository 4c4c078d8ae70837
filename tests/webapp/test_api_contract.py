"""The API's contract at its edges (issue #30): what the OpenAPI document says of a value is what
the server accepts, and every refusal is a documented problem.

- each value rule (rules.py) accepts exactly what the core's check accepts, over generated text;
- the document states the constraints the fuzzer found missing (ids of 128 characters, cursors,
  the failure classes, non-blank reasons, UUID receipts) and every status an operation answers;
- 548.0 is the integer 548; an enum refusal lists the values; a bad path id is a documented 422;
- 405 carries Allow, OPTIONS answers 204 with Allow without a token, 413 says 413, and a body
  not sent as JSON is 415.
(tests/webapp/test_api_schemathesis.py fuzzes the served API against the whole document.)"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema_rs
import pytest
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from scheduler_core.errors import ConfigError, ReachConfigError
from scheduler_core.reach.queue import FAILURE_CLASSES
from scheduler_core.validation import ID_MAX
from tests.webapp.api_support import Api, assert_problem, make_api
from webapp.api import OPERATIONS, rules
from webapp.api.core import MAX_BODY
from webapp.api.openapi import document, errors_of

RULES = {"Id": rules.Id, "PathId": rules.PathId, "SegmentId": rules.SegmentId, "Group": rules.Group,
         "QueueReceipt": rules.QueueReceipt, "JournalCursor": rules.JournalCursor,
         "QueueCursor": rules.QueueCursor, "Reason": rules.Reason, "StrippedId": rules.StrippedId,
         "MessageId": rules.MessageId, "Name": rules.text(255, single_line=True), "Query": rules.text(500, blank=True)}
# Text near every rule's edges: blanks of each kind, controls, slashes and dots, digits and UUIDs.
PIECES = st.sampled_from([" ", "\t", "\n", "\r", "\x00", "\x1f", "\x7f", "\x85", "\xa0", "\u2003", "\u3000", "\ufeff",
                          "/", ".", "..", "a", "Z", "0", "9", "-", "é", "😀", "9007199254740991", "9007199254740992",
                          "0" * 16, "12345678-1234-1234-1234-123456789abc", "{", "urn:uuid:"])
TEXT = st.one_of(st.text(max_size=140), st.lists(PIECES, max_size=12).map("".join),
                 st.integers(0, 140).map(lambda n: "a" * n), st.text(max_size=3).map(lambda t: "a" * 126 + t))


def _accepted_by_check(annotation: Any, value: str) -> bool:
    checked = next(meta for meta in annotation.__metadata__ if isinstance(meta, rules.Checked))
    try:
        checked.check(value, "field")
    except (ConfigError, ReachConfigError):
        return False
    return True


_validators: dict[int, Any] = {}


def _accepted_by_schema(annotation: Any, value: str) -> bool:
    """JSON Schema 2020-12 as schemathesis validates it (jsonschema_rs: ECMA-262-like patterns, whose
    ``$`` is the end, where Python's ``re`` also matches before a final newline)."""
    if id(annotation) not in _validators:
        _validators[id(annotation)] = jsonschema_rs.validator_for(TypeAdapter(annotation).json_schema())
    return bool(_validators[id(annotation)].is_valid(value))


@pytest.mark.parametrize("name", sorted(RULES))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=TEXT)
def test_each_rule_documents_exactly_what_its_check_accepts(name: str, value: str) -> None:
    annotation = RULES[name]
    assert _accepted_by_schema(annotation, value) == _accepted_by_check(annotation, value), (name, value)


@pytest.mark.parametrize(("name", "value", "accepted"), [
    ("JournalCursor", "9007199254740991.a", True), ("JournalCursor", "9007199254740992.a", False),
    ("JournalCursor", "0000000000000000.x.y", True), ("JournalCursor", "1.", False), ("JournalCursor", "1. ", False),
    ("QueueCursor", "5.12345678-1234-1234-1234-123456789abc", True), ("QueueCursor", "5.1234", False),
    ("PathId", "a/b", True), ("PathId", "a//b", False), ("PathId", "a/../b", False), ("PathId", " / ", True),
    ("SegmentId", "a/b", False), ("SegmentId", "..", False), ("SegmentId", "...", True),
    ("Id", "a" * ID_MAX, True), ("Id", "a" * (ID_MAX + 1), False), ("Id", "\u3000", False),
    ("StrippedId", "  key  ", True), ("StrippedId", " \t ", True), ("StrippedId", " " * 200 + "k", True),
    ("StrippedId", "a\tb", False), ("MessageId", "m\nid", False), ("Reason", " \n", False),
])
def test_the_rules_at_their_edges(name: str, value: str, accepted: bool) -> None:
    annotation = RULES[name]
    assert _accepted_by_check(annotation, value) is accepted
    assert _accepted_by_schema(annotation, value) is accepted


def _parameters(path: str, method: str) -> dict[str, dict[str, Any]]:
    return {p["name"]: p["schema"] for p in document()["paths"][path][method]["parameters"]}


def _any_of(schema: dict[str, Any]) -> dict[str, Any]:
    return next((s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"), schema)


def test_the_document_states_the_servers_constraints() -> None:
    schemas = document()["components"]["schemas"]
    task_id = _parameters("/api/v1/tasks/{task_id}", "get")["task_id"]
    assert task_id["maxLength"] == ID_MAX and task_id["minLength"] == 1 and task_id["pattern"]
    assert schemas["TaskCreate"]["properties"]["id"] == {**task_id, "title": "Id"}  # one type, one schema
    assert _parameters("/api/v1/notifications/requeue/{queue_id}", "post")["queue_id"]["format"] == "uuid"
    for path in ("/api/v1/executions", "/api/v1/logs"):
        cursors = _parameters(path, "get")
        assert re.search(r"\\\.", _any_of(cursors["before"])["pattern"]) and _any_of(cursors["after"])["pattern"]
    assert _any_of(_parameters("/api/v1/tasks", "get")["after"])["maxLength"] == ID_MAX
    dead = _parameters("/api/v1/notifications/dead", "get")
    assert _any_of(dead["failure"])["enum"] == list(FAILURE_CLASSES)
    assert _any_of(dead["after"])["pattern"]
    for model in ("ResolveExecution", "ResolveDelivery", "PauseIn"):
        reason = schemas[model]["properties"]["reason"]
        assert reason["minLength"] == 1 and reason["pattern"].startswith("^(?!"), model
    assert schemas["ResolveDelivery"]["then"]["properties"]["message_id"]
    assert "null" not in json.dumps(schemas["TaskUpdate"]["properties"]["name"])  # leave it out, never null


def test_every_operation_documents_every_status_it_answers() -> None:
    paths = document()["paths"]
    for op in OPERATIONS:
        documented = set(paths[op.path][op.method.lower()]["responses"])
        assert {str(code) for code in errors_of(op)} | {str(op.status)} == documented
        assert {"401", "403", "414", "429", "503"} <= documented
        if op.path_arguments or op.query or op.body:
            assert "422" in documented, op.endpoint
        if op.body:
            assert {"400", "413", "415"} <= documented, op.endpoint


@pytest.fixture
def api(app: Flask) -> Api:
    return make_api(app)


@pytest.mark.parametrize("path", ["/api/v1/tasks/%0A", "/api/v1/executions/%20", "/api/v1/tasks/resume/a%09b",
                                  "/api/v1/logs/repair/..", "/api/v1/executions/" + "x" * 129])
def test_a_bad_path_id_is_a_documented_422(api: Api, path: str) -> None:
    method = "GET" if "/repair/" not in path and "/resume/" not in path else "POST"
    op = next(op for op in OPERATIONS if op.method == method and re.fullmatch(
        re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(op.path)), path))
    assert "422" in document()["paths"][op.path][method.lower()]["responses"]
    problem = assert_problem(api.call(method, path, "operator"), 422, "hai:scheduler:012")
    assert problem["field"] in ("task_id", "occurrence_id")


def test_an_integer_valued_float_is_an_integer(api: Api) -> None:
    task = api.call("GET", "/api/v1/tasks/walk").get_json()
    changed = api.call("PATCH", "/api/v1/tasks/walk", body={"expected_updated_at": float(task["updated_at"]),
                                                             "description": "548.0 is 548"})
    assert changed.status_code == 200, changed.get_json()
    paused = api.call("POST", "/api/v1/tasks/pause/walk", body={"reason": "window", "minutes": 30.0})
    assert paused.status_code == 200, paused.get_json()
    refused = api.call("PATCH", "/api/v1/tasks/walk", body={"expected_updated_at": 1.5, "description": "x"})
    assert_problem(refused, 422, field="expected_updated_at")


@pytest.mark.parametrize("junk", [" 5", "5 ", "+5", "5_0", "\u0665", "5.0", "-1", ""])
def test_a_number_in_the_query_is_ascii_digits(api: Api, junk: str) -> None:
    from urllib.parse import quote
    assert api.call("GET", "/api/v1/executions?limit=5").status_code == 200
    problem = assert_problem(api.call("GET", f"/api/v1/executions?limit={quote(junk)}"), 422, field="limit")
    assert "ASCII digits" in problem["detail"] or junk in ("-1",), problem


def test_an_enum_refusal_lists_the_values(api: Api) -> None:
    problem = assert_problem(api.call("GET", "/api/v1/executions?status=nope"), 422, field="status")
    assert "'queued'" in problem["detail"] and "<ExecutionStatus" not in problem["detail"], problem


def test_405_names_the_allowed_methods(api: Api) -> None:
    for method, path in (("TRACE", "/api/v1/health"), ("PUT", "/api/v1/tasks/walk"),
                         ("GET", "/api/v1/logs/repair-all")):
        response = api.call(method, path)
        assert_problem(response, 405, "hai:api:405")
        allowed = {name.strip() for name in response.headers["Allow"].split(",")}
        assert allowed and method not in allowed and "OPTIONS" in allowed, response.headers


def test_options_answers_204_with_allow_without_a_token(api: Api) -> None:
    response = api.call("OPTIONS", "/api/v1/tasks/walk", role=None)
    assert response.status_code == 204 and not response.get_data()
    assert set(response.headers["Allow"].split(", ")) == {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH"}


def test_a_body_too_large_is_413_with_its_own_code(api: Api) -> None:
    response = api.call("POST", "/api/v1/tasks", raw=b" " * (MAX_BODY + 1))
    assert_problem(response, 413, "hai:api:413", "body")


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None,
                                          "application/jsonx", "multipart/form-data; boundary=x"])
def test_a_body_not_sent_as_json_is_415(api: Api, content_type: str | None) -> None:
    headers = {"Authorization": f"Bearer {api.tokens['operator']}"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    response = api.client.post("/api/v1/tasks/trigger/walk", data=b"{}", headers=headers)
    problem = assert_problem(response, 415, "hai:api:415", "Content-Type")
    assert (content_type or "none") in problem["detail"]


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON", "application/merge-patch+json"])
def test_json_content_types_are_accepted(api: Api, content_type: str) -> None:
    headers = {"Authorization": f"Bearer {api.tokens['operator']}", "Content-Type": content_type}
    assert api.client.post("/api/v1/tasks/trigger/walk", data=b"{}", headers=headers).status_code == 202
