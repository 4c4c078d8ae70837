"""The OpenAPI 3.1 document at /api/v1/openapi.json: valid (openapi-spec-validator), public,
generated from the models the handlers validate with, and complete -- every API route is in
it, with the role it needs. (tests/webapp/test_api_walk.py drives every operation it lists.)"""

from __future__ import annotations

from typing import Any

from flask import Flask
from openapi_spec_validator import validate

from webapp.api import OPERATIONS
from webapp.api.openapi import REF


def _document(app: Flask) -> dict[str, Any]:
    response = app.test_client().get("/api/v1/openapi.json")  # no token: the document holds no data
    assert response.status_code == 200 and response.mimetype == "application/json"
    document: dict[str, Any] = response.get_json()
    return document


def test_the_document_is_valid_openapi_3_1(app: Flask) -> None:
    document = _document(app)
    assert document["openapi"].startswith("3.1")
    validate(document)


def test_every_api_route_is_documented_with_its_role(app: Flask) -> None:
    document = _document(app)
    routes = {(method, rule.rule) for rule in app.url_map.iter_rules() if rule.endpoint.startswith("api.")
              and rule.endpoint != "api.openapi" for method in (rule.methods or ()) - {"HEAD", "OPTIONS"}}
    documented = {(op.method, "/api/v1" + op.rule) for op in OPERATIONS}
    assert routes == documented
    for op in OPERATIONS:
        entry = document["paths"][op.path][op.method.lower()]
        assert entry["operationId"] == op.endpoint and f"Needs the {op.role} role" in entry["description"]
        assert str(op.status) in entry["responses"] and "401" in entry["responses"]
        assert "Retry-After" in entry["responses"]["429"]["headers"]


def test_the_schemas_are_the_handlers_models(app: Flask) -> None:
    """Request bodies and answers point at components generated from the pydantic models the
    handlers validate with: change a model and the document follows."""
    document = _document(app)
    schemas = document["components"]["schemas"]
    for op in OPERATIONS:
        entry = document["paths"][op.path][op.method.lower()]
        answer = entry["responses"][str(op.status)]["content"]["application/json"]["schema"]
        assert answer == {"$ref": REF.format(model=op.response.__name__)}
        assert schemas[op.response.__name__]["properties"].keys() == op.response.model_fields.keys()
        if op.body is not None:
            body = entry["requestBody"]["content"]["application/json"]["schema"]
            assert body == {"$ref": REF.format(model=op.body.__name__)}
            assert schemas[op.body.__name__]["properties"].keys() == op.body.model_fields.keys()
            assert schemas[op.body.__name__]["additionalProperties"] is False  # unknown fields are refused
        if op.query is not None:
            names = {p["name"] for p in entry["parameters"] if p["in"] == "query"}
            assert names == set(op.query.model_fields)
    problem = schemas["Problem"]["properties"]
    assert {"type", "title", "status", "detail", "code", "field"} <= problem.keys()
