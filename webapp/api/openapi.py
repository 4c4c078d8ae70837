"""``GET /api/v1/openapi.json``: the OpenAPI 3.1 document, generated at start from ``OPERATIONS``
and the pydantic models the handlers validate with (JSON Schema 2020-12, which OpenAPI 3.1
uses as it is). Nothing here is written by hand but the words; the document is public (it
holds no data) and is validated by tests/webapp/test_api_openapi.py."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from flask import Response
from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import models_json_schema

from webapp.api import schemas as s
from webapp.api.core import OPERATIONS, Operation, bp

REF = "#/components/schemas/{model}"
ERRORS = {401: "No valid token", 403: "The token's user has a lower role",
          414: "The request line is longer than the server reads (4094 bytes under hai-scheduler serve)",
          429: "Rate limit reached: see Retry-After", 503: "The database is unavailable"}
PATH_ERRORS = {404: "Not found"}
INPUT_ERRORS = {422: "Invalid input: the field is named"}
WRITE_ERRORS = {409: "Changed meanwhile (compare-and-set), or not in the state the action needs"}
BODY_ERRORS = {400: "The body is not a JSON object", 413: "The body is too large",
               415: "The body is not sent as application/json"}


def _models() -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = [s.Problem]
    for op in OPERATIONS:
        found += [model for model in (op.body, op.response) if model is not None]
    return list(dict.fromkeys(found))


def _parameters(op: Operation) -> list[dict[str, Any]]:
    parameters: list[dict[str, Any]] = []
    for name in op.path_arguments:  # the schema of the type the handler checks the argument with
        schema = TypeAdapter(op.path_types[name]).json_schema(ref_template=REF)
        parameters.append({"name": name, "in": "path", "required": True, "schema": schema,
                           "description": schema.get("description", "")})
    if op.query is not None:
        schema = op.query.model_json_schema(ref_template=REF)
        required = set(schema.get("required", []))
        for name, prop in schema["properties"].items():
            parameters.append({"name": name, "in": "query", "required": name in required, "schema": prop,
                               "description": prop.get("description", "")})
    return parameters


INTEGER = {"schema": {"type": "integer", "minimum": 0}}
RETRY_AFTER = {"Retry-After": {"description": "seconds until the token's window ends", **INTEGER}}
REMAINING = {"X-RateLimit-Remaining": {"description": "calls this token has left in its minute", **INTEGER}}


def _problem(code: int, description: str) -> dict[str, Any]:
    answer = {"description": description,
              "content": {"application/problem+json": {"schema": {"$ref": REF.format(model="Problem")}}}}
    return {**answer, "headers": RETRY_AFTER} if code == 429 else answer


def errors_of(op: Operation) -> dict[int, str]:
    """Every problem status ``op`` can answer with."""
    errors = dict(ERRORS)
    if op.path_arguments:
        errors.update(PATH_ERRORS)
    if op.path_arguments or op.query is not None or op.body is not None:
        errors.update(INPUT_ERRORS)
    if op.method != "GET":
        errors.update(WRITE_ERRORS)
    if op.body is not None:
        errors.update(BODY_ERRORS)
    return errors


def _operation(op: Operation) -> dict[str, Any]:
    errors = errors_of(op)
    document: dict[str, Any] = {
        "operationId": op.endpoint, "summary": op.summary, "tags": [op.tag],
        "description": f"Needs the {op.role} role (viewer < operator < admin).",
        "parameters": _parameters(op),
        "responses": {str(op.status): {"description": "OK", "headers": REMAINING, "content": {"application/json": {
            "schema": {"$ref": REF.format(model=op.response.__name__)}}}},
            **{str(code): _problem(code, text) for code, text in sorted(errors.items())}},
    }
    if op.body is not None:
        document["requestBody"] = {"required": True, "content": {"application/json": {
            "schema": {"$ref": REF.format(model=op.body.__name__)}}}}
    return document


@cache
def document() -> dict[str, Any]:
    _, definitions = models_json_schema([(model, "validation") for model in _models()], ref_template=REF)
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op)
    return {
        "openapi": "3.1.0",
        "info": {"title": "hai-scheduler API", "version": "1",
                 "description": "The dashboard's operations as JSON. Authenticate with a personal API token: "
                                "Authorization: Bearer <token>. Errors are RFC 9457 problem details."},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {"schemas": definitions.get("$defs", {}),
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                                      "description": "a personal API token (hai_...)"}}},
    }


@bp.get("/openapi.json")
def openapi() -> Response:
    return Response(json.dumps(document(), ensure_ascii=False), mimetype="application/json")
