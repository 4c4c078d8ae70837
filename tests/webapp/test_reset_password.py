"""The password forms of the Users pages (reset a user's password, create a user): a refused
post shows the form again with both passwords as typed (README: "a refused form shows again
exactly what was typed -- a secret just entered included"), escaped, on a page no cache keeps;
and the forms are plain, not boosted by htmx, whose swap would copy a password manager's style
attribute onto the new fields against the Content-Security-Policy (the browser test
tests/browser/test_reset_password_page.py sees the violations)."""

from __future__ import annotations

import re

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from tests.webapp.conftest import Auth, csrf_token
from webapp.node import accounts_of

TRICKY = 'a "quoted" <b>&amp; pw'  # must come back in its field, escaped, never as markup


def _value(raw_page: str, element_id: str) -> str | None:
    match = re.search(rf'<input id="{element_id}"[^>]*\svalue="([^"]*)"', raw_page)
    return match.group(1) if match else None


@pytest.fixture
def admin(app: Flask, client: FlaskClient, auth: Auth) -> FlaskClient:
    accounts_of(app).create("member", "viewer", generate_password_hash("member-password"))
    auth.login()
    return client


def _reset(client: FlaskClient, app: Flask, password: str, confirm: str) -> tuple[int, str, str]:
    member = accounts_of(app).get("member")
    assert member is not None
    response = client.post("/users/password/member", data={
        "password": password, "confirm": confirm, "expected_updated_at": member.updated_at,
        "csrf_token": csrf_token(client, "/")})
    return response.status_code, response.get_data(as_text=True), response.headers.get("Cache-Control", "")


def test_a_mismatch_keeps_both_passwords_as_typed(app: Flask, admin: FlaskClient) -> None:
    before = accounts_of(app).get("member")
    status, page, cache = _reset(admin, app, "first typed pw 1", "second typed pw 2")
    assert status == 400 and cache == "no-store"
    assert (_value(page, "user-password"), _value(page, "user-confirm")) == ("first typed pw 1", "second typed pw 2")
    assert 'id="user-confirm-error">Must repeat the password exactly' in page
    assert accounts_of(app).get("member") == before


def test_typed_passwords_come_back_escaped(app: Flask, admin: FlaskClient) -> None:
    status, page, _ = _reset(admin, app, TRICKY, TRICKY + "!")
    escaped = "a &#34;quoted&#34; &lt;b&gt;&amp;amp; pw"
    assert status == 400 and (_value(page, "user-password"), _value(page, "user-confirm")) == (escaped, escaped + "!")
    assert "<b>" not in page


def test_a_refused_new_user_keeps_both_passwords(admin: FlaskClient) -> None:
    response = admin.post("/users/new", data={"name": "bad name", "role": "viewer", "password": "new typed pw 1",
                                              "confirm": "new typed pw 2", "csrf_token": csrf_token(admin, "/")})
    page = response.get_data(as_text=True)
    assert response.status_code == 400
    assert (_value(page, "new-password"), _value(page, "new-confirm")) == ("new typed pw 1", "new typed pw 2")


def test_a_fresh_form_shows_no_password(admin: FlaskClient) -> None:
    for path, fields in (("/users/manage/member", ("user-password", "user-confirm")),
                         ("/users/new", ("new-password", "new-confirm"))):
        page = admin.get(path).get_data(as_text=True)
        assert [_value(page, field) for field in fields] == ["", ""], path


@pytest.mark.parametrize("path", ["/users/manage/member", "/users/new", "/users/", "/login"])
def test_the_users_and_sign_in_pages_carry_no_inline_style_and_no_boosted_form(admin: FlaskClient, path: str) -> None:
    page = admin.get(path).get_data(as_text=True)
    assert re.search(r"\sstyle\s*=", page) is None and "<style" not in page
    assert "hx-boost" not in page
