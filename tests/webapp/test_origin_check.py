"""Behind the CSRF token, a second layer: a POST, PUT, PATCH or DELETE to the dashboard is
refused (403, nothing changed) when the browser says it comes from another site -- an ``Origin``
that is not the dashboard's own (the address the request was sent to, the same host over https,
HAI_PUBLIC_URL) or ``Sec-Fetch-Site: cross-site``. Without either header (curl, old browsers) the token alone
decides; the JSON API (bearer tokens, no cookie) is not concerned."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from tests.webapp.conftest import ADMIN_PASSWORD, Auth, _dashboard, csrf_token
from webapp.node import accounts_of

NEW_PASSWORD = "n3w-Secret-pass!"


def _create_user(client: FlaskClient, name: str, **headers: str) -> Any:
    """The new-user form, posted with a valid CSRF token and ``headers``."""
    form = {"name": name, "role": "viewer", "password": NEW_PASSWORD, "confirm": NEW_PASSWORD,
            "csrf_token": csrf_token(client, "/")}
    return client.post("/users/new", data=form, headers=headers)


def _signed_in(app: Flask) -> FlaskClient:
    client = app.test_client()
    assert Auth(client).login().status_code == 302
    return client


@pytest.mark.parametrize("headers", [
    {"Origin": "https://evil.example"},
    {"Origin": "http://localhost.evil.example"},
    {"Origin": "http://localhost:8080"},  # another port is another origin
    {"Origin": "null"},  # a sandboxed frame, a data: page
    {"Origin": "http://localhost", "Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "cross-site"},
])
def test_a_form_from_another_site_is_refused_even_with_a_valid_token(app: Flask, headers: dict[str, str]) -> None:
    client = _signed_in(app)
    refused = _create_user(client, "forged", **headers)
    page = html.unescape(refused.get_data(as_text=True))
    assert refused.status_code == 403 and "Refused" in page and "Nothing was changed" in page, page
    assert accounts_of(app).get("forged") is None


@pytest.mark.parametrize("headers", [
    {},  # curl, an old browser: the CSRF token decides
    {"Origin": "http://localhost"},
    {"Origin": "HTTP://LOCALHOST:80"},  # the default port, any case
    {"Origin": "https://localhost"},  # the same host over https: a TLS-terminating proxy in front
    {"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"},
    {"Sec-Fetch-Site": "same-origin"},
    {"Sec-Fetch-Site": "none"},  # typed into the address bar, a bookmark
])
def test_a_form_from_the_dashboard_itself_passes(app: Flask, headers: dict[str, str]) -> None:
    client = _signed_in(app)
    assert _create_user(client, "welcome", **headers).status_code == 303
    assert accounts_of(app).get("welcome") is not None


def test_the_token_is_still_required_from_the_dashboards_own_origin(app: Flask) -> None:
    client = _signed_in(app)
    form = {"name": "tokenless", "role": "viewer", "password": NEW_PASSWORD, "confirm": NEW_PASSWORD}
    assert client.post("/users/new", data=form, headers={"Origin": "http://localhost"}).status_code == 400
    assert accounts_of(app).get("tokenless") is None


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_every_unsafe_method_is_checked_and_safe_ones_are_not(app: Flask, method: str) -> None:
    client = _signed_in(app)
    token = csrf_token(client, "/")
    evil = {"Origin": "https://evil.example", "X-CSRFToken": token}
    assert client.open("/logout", method=method, headers=evil).status_code == 403
    own = {"Origin": "http://localhost", "X-CSRFToken": token}
    assert client.open("/logout", method=method, headers=own).status_code == (302 if method == "POST" else 405)
    assert client.get("/login", headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
                      ).status_code == 200


def test_a_sign_in_from_another_site_is_refused(app: Flask) -> None:
    client = app.test_client()
    form = {"username": "admin", "password": ADMIN_PASSWORD, "csrf_token": csrf_token(client)}
    assert client.post("/login", data=form, headers={"Origin": "https://evil.example"}).status_code == 403
    assert client.get("/").status_code == 302  # not signed in


@pytest.fixture
def public_app(tmp_path: Path) -> Iterator[Flask]:
    yield from _dashboard(f"sqlite:///{tmp_path}/public.db", PUBLIC_URL="https://scheduler.example/",
                          SECRET_KEY="o" * 40)


def test_hai_public_url_is_the_dashboards_origin_too(public_app: Flask) -> None:
    client = _signed_in(public_app)
    assert _create_user(client, "viapublic", Origin="https://scheduler.example").status_code == 303
    assert _create_user(client, "viahttp", Origin="http://scheduler.example").status_code == 403
    assert _create_user(client, "viahost", Origin="http://localhost").status_code == 303


def test_forwarded_headers_name_no_origin(app: Flask) -> None:
    """Only the Host the request arrived with (or HAI_PUBLIC_URL) names the dashboard."""
    client = _signed_in(app)
    forwarded = {"X-Forwarded-Host": "scheduler.example", "X-Forwarded-For": "203.0.113.9"}
    assert _create_user(client, "spoofed", Origin="http://scheduler.example", **forwarded).status_code == 403
    assert accounts_of(app).get("spoofed") is None


def test_the_json_api_is_not_concerned(app: Flask) -> None:
    accounts_of(app).create("robot", "operator", generate_password_hash("robot-password"))
    secret = app.extensions["hai_api_tokens"].create("robot", "ci").secret
    answer = app.test_client().post("/api/v1/tasks/trigger/missing", json={}, headers={
        "Authorization": f"Bearer {secret}", "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert answer.status_code == 404  # signed in by its token: the task is what is missing
