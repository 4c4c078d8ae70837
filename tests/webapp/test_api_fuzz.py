"""No 500 from the JSON API, ever, on SQLite, PostgreSQL and MariaDB: every field of every write's
body gets junk of every JSON type (huge and negative numbers, floats, NUL, lone surrogates,
unicode digits, long strings, nests, null, lists, objects), the bodies themselves are junk (not
JSON, not UTF-8, NaN, arrays, 5,000-digit numbers, deep nests), path ids are junk, and every
query parameter of every read gets the route fuzz's malformed values. Each answer must be a
problem (RFC 9457) below 500 -- or a success when the junk happens to be valid -- and a
refused write changes nothing. (The form fuzz, tests/webapp/test_route_fuzz.py, leaves the API
to this file.)"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from flask import Flask

from tests.webapp.api_support import Api, make_api, snapshot
from tests.webapp.test_api_walk import REQUESTS
from tests.webapp.test_route_fuzz import MALFORMED
from webapp.api import OPERATIONS

JSON_JUNK: tuple[Any, ...] = (None, True, False, 0, -1, 2**63, -(2**63), 10**40, 1.5, 1e308, "", " ", "\x00",
                              "a\x00b", "\ud800", "x\udfff", "²", "٣", "a" * 70_000, "\r\n", [], [1, "a"], {},
                              {"a": {"b": [None]}}, {"kind": "python", "code": "print(1)"})
BODY_JUNK: tuple[bytes, ...] = (b"", b"not json", b"\xff\xfe", b"[]", b'"a"', b"5", b"null", b"NaN",
                                b'{"a": NaN}', b'{"a": Infinity}', b"{" * 5_000, b"[" * 100_000,
                                b'{"expected_updated_at": ' + b"9" * 5_000 + b"}", b'{"a": 1,}', b"{'a': 1}",
                                b'{"expected_updated_at": "\\ud800"}', b'{"\\u0000": 1}')
PATH_JUNK = ("%00", "%ED%A0%80", "a" * 3_000, "..", "%2e%2e", "%FF", "x%0D%0Ay", "٣")


@pytest.fixture
def api(db_app: Flask) -> Api:
    return make_api(db_app)


def _check(api: Api, what: str, response: Any, before: Any = None) -> str | None:
    status = response.status_code
    if status >= 500:
        return f"{what}: {status} {response.get_data(as_text=True)[:300]}"
    if status >= 400:
        problem = response.get_json(silent=True) or {}
        if response.mimetype != "application/problem+json" or not problem.get("code") or not problem.get("detail"):
            return f"{what}: {status} without problem details: {response.get_data(as_text=True)[:200]}"
        if before is not None and snapshot(api.app) != before:
            return f"{what}: refused ({status}) but changed the database"
    return None


def _send(api: Api, method: str, path: str, role: str, raw: bytes) -> Any:
    try:
        return api.call(method, path, role, raw=raw)
    except Exception as exc:  # TESTING propagates what would be a 500
        raise AssertionError(f"{method} {path} {raw[:80]!r} raised {type(exc).__name__}: {exc!s:.300}") from exc


def test_junk_in_every_field_of_every_write_never_answers_500(api: Api) -> None:
    problems = []
    for op in [op for op in OPERATIONS if op.body is not None]:
        for field in op.body.model_fields:  # type: ignore[union-attr]
            for value in JSON_JUNK:
                path, body = REQUESTS[op.endpoint](api)
                raw = json.dumps({**body, field: value}).encode("utf-8", "surrogatepass")
                before = snapshot(api.app)
                response = _send(api, op.method, path, op.role, raw)
                problem = _check(api, f"{op.method} {path} {field}={str(value)[:30]!r}", response,
                                 before if response.status_code >= 400 else None)
                if problem:
                    problems.append(problem)
    assert not problems, "\n".join(problems)


def test_junk_bodies_are_400_or_422_and_change_nothing(api: Api) -> None:
    problems = []
    for op in [op for op in OPERATIONS if op.method != "GET"]:
        path, _ = REQUESTS[op.endpoint](api)
        for raw in BODY_JUNK:
            before = snapshot(api.app)
            response = _send(api, op.method, path, op.role, raw)
            if op.body is not None and response.status_code not in (400, 413, 422):
                problems.append(f"{op.method} {path} {raw[:40]!r}: {response.status_code}, not 400/422")
            problem = _check(api, f"{op.method} {path} {raw[:40]!r}", response,
                             before if response.status_code >= 400 else None)
            if problem:
                problems.append(problem)
    assert not problems, "\n".join(problems)


def test_junk_ids_and_query_parameters_never_answer_500(api: Api) -> None:
    problems = []
    for op in OPERATIONS:
        path, body = REQUESTS[op.endpoint](api)
        raw = json.dumps(body).encode() if body is not None else None
        for argument in op.path_arguments:
            for junk in PATH_JUNK:
                junk_path = "/api/v1" + op.rule.replace(f"<path:{argument}>", junk).replace(f"<{argument}>", junk)
                response = api.call(op.method, junk_path, op.role, raw=raw)
                problem = _check(api, f"{op.method} {junk_path[:80]}", response)
                if problem:
                    problems.append(problem)
        for name in (op.query.model_fields if op.query is not None else ()):
            for junk in MALFORMED:
                query = f"{name}={quote(junk.encode('utf-8', 'surrogatepass'))}"
                response = api.call("GET", f"{path.split('?')[0]}?{query}", op.role)
                problem = _check(api, f"GET {path.split('?')[0]}?{query[:60]}", response)
                if problem:
                    problems.append(problem)
    assert not problems, "\n".join(problems)
