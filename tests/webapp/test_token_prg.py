"""A new API token on the Users page: post/redirect/get, shown once, names unique per user.

The form's POST creates the token and redirects; the GET shows it the first time the creating
browser opens the page, and a reload (or another browser) gets "already shown" (410) and creates
nothing. The token is never in a URL, the session cookie or a database row; the session holds a
one-time pad, the row the token sealed with it until its display. A user's tokens have distinct
names, revoked ones included, on the page and in ``hai-scheduler create-token``; the list and the
revoke confirmation name a token by its name, its first characters and its creation time."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update
from werkzeug.security import generate_password_hash

from scheduler_core.db.account_tables import api_tokens
from scheduler_core.runtime.api_tokens import PREFIX_LENGTH, SEALED_MAX_AGE_MS
from tests.webapp.conftest import ADMIN_PASSWORD, Auth, csrf_token
from webapp.cli import main
from webapp.node import accounts_of, audit_of

TOKEN = re.compile(r"data-token>(hai_[A-Za-z0-9_-]{43})<")
CREATED = re.compile(r"^/users/tokens/created/grafana/([0-9a-f-]{36})$")


@pytest.fixture
def admin(app: Flask, client: FlaskClient, auth: Auth) -> FlaskClient:
    accounts_of(app).create("grafana", "viewer", generate_password_hash("grafana-password"))
    auth.login()
    return client


def _create(client: FlaskClient, name: str = "dashboards", user: str = "grafana") -> Any:
    return client.post(f"/users/tokens/new/{user}", data={"name": name, "expires_days": "",
                                                          "csrf_token": csrf_token(client, "/users/manage/admin")})


def _rows(app: Flask) -> list[dict[str, Any]]:
    with app.extensions["hai_engine"].connect() as conn:
        rows = [dict(row._mapping) for row in conn.execute(select(api_tokens).order_by(api_tokens.c.created_at))]
        conn.rollback()
    return rows


def _text(response: Any) -> str:
    return html.unescape(response.get_data(as_text=True))


def _works(app: Flask, token: str) -> bool:
    return app.test_client().get("/api/v1/tasks", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_the_post_redirects_and_the_get_shows_the_token_once(app: Flask, admin: FlaskClient) -> None:
    posted = _create(admin)
    assert posted.status_code == 303
    location = posted.headers["Location"]
    assert CREATED.match(location) and "hai_" not in location
    [row] = _rows(app)
    assert row["sealed_secret"] is not None and location.endswith(row["id"])
    shown = admin.get(location)
    token = TOKEN.search(shown.get_data(as_text=True))
    assert shown.status_code == 200 and shown.headers["Cache-Control"] == "no-store" and token
    secret = token.group(1)
    assert _works(app, secret)
    [row] = _rows(app)
    assert row["sealed_secret"] is None and row["prefix"] == secret[:PREFIX_LENGTH]
    assert not any(secret in str(value) for value in row.values())
    assert secret not in posted.headers.get("Set-Cookie", "") + shown.headers.get("Set-Cookie", "")
    again = admin.get(location)  # the reload
    page = _text(again)
    assert again.status_code == 410 and "already shown" in page and "creates no new token" in page
    assert TOKEN.search(again.get_data(as_text=True)) is None and secret not in page
    assert f"{secret[:PREFIX_LENGTH]}…" in page
    assert len(_rows(app)) == 1 and len(audit_of(app).list(action="token.create")) == 1


def test_another_browser_never_sees_it_and_takes_nothing_from_the_creator(app: Flask, admin: FlaskClient) -> None:
    location = _create(admin).headers["Location"]
    other = app.test_client()
    assert Auth(other).login("admin", ADMIN_PASSWORD).status_code == 302
    refused = other.get(location)
    assert refused.status_code == 410 and TOKEN.search(refused.get_data(as_text=True)) is None
    assert admin.get(location).status_code == 200  # the creator's one display is still there


def test_a_token_not_opened_in_time_or_revoked_first_is_never_shown(app: Flask, admin: FlaskClient) -> None:
    late = _create(admin, "late").headers["Location"]
    revoked = _create(admin, "revoked").headers["Location"]
    with app.extensions["hai_engine"].begin() as conn:
        conn.execute(update(api_tokens).where(api_tokens.c.name == "late").values(
            created_at=api_tokens.c.created_at - SEALED_MAX_AGE_MS - 1000))
    revoked_id = CREATED.match(revoked).group(1)  # type: ignore[union-attr]
    assert app.extensions["hai_api_tokens"].revoke("grafana", revoked_id)
    assert admin.get(late).status_code == 410 and admin.get(revoked).status_code == 410
    assert [row["sealed_secret"] for row in _rows(app)] == [None, None]


def test_a_token_of_another_user_or_an_unknown_id_is_404(app: Flask, admin: FlaskClient) -> None:
    token_id = CREATED.match(_create(admin).headers["Location"]).group(1)  # type: ignore[union-attr]
    assert admin.get(f"/users/tokens/created/admin/{token_id}").status_code == 404
    assert admin.get("/users/tokens/created/grafana/not-a-token").status_code == 404
    assert admin.get(f"/users/tokens/created/grafana/{token_id}").status_code == 200


def test_several_tabs_each_show_their_own_token_once(app: Flask, admin: FlaskClient) -> None:
    locations = [_create(admin, f"tab-{n}").headers["Location"] for n in range(3)]
    secrets = [TOKEN.search(admin.get(location).get_data(as_text=True)) for location in reversed(locations)]
    assert all(secrets) and len({m.group(1) for m in secrets if m}) == 3
    assert [admin.get(location).status_code for location in locations] == [410, 410, 410]


# --- names are unique per user --------------------------------------------------------------------------


def test_a_duplicate_name_is_refused_by_name_even_after_a_revocation(app: Flask, admin: FlaskClient) -> None:
    first = CREATED.match(_create(admin, "ci").headers["Location"]).group(1)  # type: ignore[union-attr]
    refused = _create(admin, "ci")
    page = _text(refused)
    assert refused.status_code == 400
    assert re.search(r'id="user-token_name-error">[^<]*already has a token named \'ci\'', page), page
    assert 'value="ci"' in page  # what was typed stays
    assert app.extensions["hai_api_tokens"].revoke("grafana", first)
    assert _create(admin, "ci").status_code == 400  # a revoked token keeps its name
    assert _create(admin, "ci", user="admin").status_code == 303  # another user's tokens are theirs
    assert _create(admin, "CI").status_code == 303  # names compare exactly, as typed
    assert sorted((row["username"], row["name"]) for row in _rows(app)) == [
        ("admin", "ci"), ("grafana", "CI"), ("grafana", "ci")]


def test_create_token_refuses_a_duplicate_name_by_name(app: Flask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HAI_DATABASE_URL", f"sqlite:///{tmp_path}/dash.db")
    accounts_of(app).create("ci-bot", "operator", generate_password_hash("ci-bot-password"))
    assert main(["create-token", "ci-bot", "--name", "pipeline"]) == 0
    capsys.readouterr()
    assert main(["create-token", "ci-bot", "--name", "pipeline"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("error: hai:scheduler:012 --name: 'ci-bot' already has a token named 'pipeline'"), err
    assert len(_rows(app)) == 1


def test_the_list_and_the_revoke_confirmation_name_the_token_by_prefix_and_time(app: Flask,
                                                                                 admin: FlaskClient) -> None:
    secret = TOKEN.search(admin.get(_create(admin, "ci").headers["Location"]).get_data(as_text=True))
    assert secret
    [row] = _rows(app)
    page = _text(admin.get("/users/manage/grafana"))
    prefix = secret.group(1)[:PREFIX_LENGTH]
    assert f"<code>{prefix}…</code>" in page
    confirm = re.search(r'data-confirm="(Revoke the token [^"]*)"', page)
    assert confirm, page
    created = re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", confirm.group(1))
    assert f"\u2068ci\u2069 ({prefix}…, created " in confirm.group(1) and created  # the name isolated (fsi)
    revoked = admin.post(f"/users/tokens/revoke/grafana/{row['id']}",
                         data={"csrf_token": csrf_token(admin, "/users/manage/grafana")})
    assert revoked.status_code == 303
    assert f"Token \u2068ci\u2069 ({prefix}…, created {created.group(0)}) of grafana is revoked" in _text(
        admin.get("/users/manage/grafana"))
