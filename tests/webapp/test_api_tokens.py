"""Personal API tokens: created on the Users page and by ``hai-scheduler create-token``, shown
once, stored hashed, revocable, carrying the user's role *now*; only ``Authorization: Bearer``
signs an API call in; the per-token rate limit is kept in the database (two apps on one
database -- two gunicorn workers -- count against one number)."""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update
from werkzeug.security import generate_password_hash

from scheduler_core.db.account_tables import api_tokens
from scheduler_core.errors import ConfigError
from tests.webapp.api_support import Api, assert_problem, make_api
from tests.webapp.conftest import ADMIN_PASSWORD, Auth, _dashboard, csrf_token
from webapp.cli import main
from webapp.node import accounts_of, audit_of


@pytest.fixture
def api(db_app: Flask) -> Api:
    return make_api(db_app)


def _tokens(app: Flask) -> object:
    return app.extensions["hai_api_tokens"]


def _rows(app: Flask) -> list[dict[str, object]]:
    with app.extensions["hai_engine"].connect() as conn:
        rows = [dict(row._mapping) for row in conn.execute(select(api_tokens))]
        conn.rollback()
    return rows


# --- what a token is and how it is kept --------------------------------------------------------------


def test_a_token_is_stored_as_its_digest_only(api: Api) -> None:
    stored = _rows(api.app)
    assert len(stored) == 3
    for secret in api.tokens.values():
        assert secret.startswith("hai_") and len(secret) == 47
        assert not any(secret in str(value) for row in stored for value in row.values())
        assert hashlib.sha256(secret.encode()).hexdigest() in {row["digest"] for row in stored}


def test_bad_arguments_name_their_field_and_create_nothing(api: Api) -> None:
    tokens = _tokens(api.app)
    cases = {("nobody", "ci", None): "user", ("bad name!", "ci", None): "user", ("viewer1", "", None): "name",
             ("viewer1", "a\x00b", None): "name", ("viewer1", "a\tb", None): "name",
             ("viewer1", "x" * 65, None): "name",
             ("viewer1", "ci", 0): "expires_days", ("viewer1", "ci", 3651): "expires_days",
             ("viewer1", "ci", True): "expires_days", ("viewer1", "ci", "7"): "expires_days",
             ("viewer1", "ci", 10**40): "expires_days"}
    for (user, name, days), field in cases.items():
        with pytest.raises(ConfigError) as raised:
            tokens.create(user, name, days)  # type: ignore[attr-defined]
        assert raised.value.field == field, (user, name, days, raised.value)
    assert len(_rows(api.app)) == 3


# --- what signs an API call in -------------------------------------------------------------------------


@pytest.mark.parametrize("header", ["", "Bearer", "Bearer ", "Basic YWRtaW46eA==", "Bearer hai_" + "x" * 43,
                                    "Bearer not-a-token", "Token {admin}", "Bearer {admin}x", "Bearer \x00"])
def test_anything_but_a_valid_bearer_token_is_401(api: Api, header: str) -> None:
    sent = header.replace("{admin}", api.tokens["admin"])
    response = api.client.get("/api/v1/tasks", headers={"Authorization": sent} if sent else {})
    problem = assert_problem(response, 401, "hai:api:401", "Authorization")
    assert "Bearer" in response.headers["WWW-Authenticate"] and "hai_" not in problem["detail"]


def test_the_scheme_is_case_insensitive(api: Api) -> None:
    response = api.client.get("/api/v1/tasks", headers={"Authorization": f"bearer {api.tokens['viewer']}"})
    assert response.status_code == 200


def test_a_session_cookie_alone_signs_no_api_call_in(api: Api, db_app: Flask) -> None:
    browser = db_app.test_client()
    assert Auth(browser).login().status_code == 302
    assert browser.get("/tasks/").status_code == 200  # the session works for the pages
    assert_problem(browser.get("/api/v1/tasks"), 401)
    assert_problem(browser.post("/api/v1/tasks/trigger/walk", json={}), 401)
    # ... and a token needs no CSRF token, cookie or not: there is nothing a cross-site form could ride
    triggered = browser.post("/api/v1/tasks/trigger/walk", json={},
                             headers={"Authorization": f"Bearer {api.tokens['operator']}"})
    assert triggered.status_code == 202, triggered.get_data(as_text=True)


def test_revoked_and_expired_tokens_are_401_at_once(api: Api) -> None:
    tokens = _tokens(api.app)
    [viewer] = [t for t in tokens.list_for("viewer1")]  # type: ignore[attr-defined]
    assert api.call("GET", "/api/v1/tasks", "viewer").status_code == 200
    assert tokens.revoke("viewer1", viewer.id)  # type: ignore[attr-defined]
    assert not tokens.revoke("viewer1", viewer.id)  # type: ignore[attr-defined]  # once
    assert_problem(api.call("GET", "/api/v1/tasks", "viewer"), 401)
    with api.engine.begin() as conn:  # the operator's token reaches its expiry
        conn.execute(update(api_tokens).where(api_tokens.c.username == "operator1").values(
            expires_at=api_tokens.c.created_at))
    assert_problem(api.call("GET", "/api/v1/tasks", "operator"), 401)
    assert api.call("GET", "/api/v1/tasks", "admin").status_code == 200


def test_a_token_carries_its_users_role_now(api: Api) -> None:
    accounts = accounts_of(api.app)
    assert api.call("POST", "/api/v1/tasks/trigger/walk", "operator", {}).status_code == 202
    operator = accounts.get("operator1")
    demoted = accounts.set_role("operator1", "viewer", operator.updated_at)  # type: ignore[union-attr]
    assert_problem(api.call("POST", "/api/v1/tasks/trigger/walk", "operator", {}), 403, "hai:api:403")
    assert api.call("GET", "/api/v1/tasks", "operator").status_code == 200  # still a viewer
    accounts.set_disabled("operator1", True, demoted.updated_at)
    assert_problem(api.call("GET", "/api/v1/tasks", "operator"), 401)


def test_an_expiring_token_says_when(api: Api) -> None:
    created = _tokens(api.app).create("viewer1", "short", 2)  # type: ignore[attr-defined]
    token = created.token
    assert token.expires_at is not None and token.expires_at - token.created_at == 2 * 86_400_000
    assert api.client.get("/api/v1/health", headers={"Authorization": f"Bearer {created.secret}"}).status_code == 200


# --- the rate limit ------------------------------------------------------------------------------------


@pytest.fixture
def limited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Flask, Flask]]:
    """Two apps on one database (as two gunicorn workers), at most 3 API requests per token and minute."""
    monkeypatch.delenv("HAI_SECRET_KEY", raising=False)
    url = f"sqlite:///{tmp_path}/limited.db"
    first = _dashboard(url, API_RATE_LIMIT=3)
    second = _dashboard(url, API_RATE_LIMIT=3)
    yield next(first), next(second)
    for made in (first, second):
        next(made, None)


def test_the_rate_limit_is_per_token_and_shared_by_every_worker(limited: tuple[Flask, Flask]) -> None:
    one, two = limited
    accounts_of(one).create("robot", "viewer", generate_password_hash("robot-password-1"))
    a = _tokens(one).create("robot", "a").secret  # type: ignore[attr-defined]
    b = _tokens(one).create("admin", "b").secret  # type: ignore[attr-defined]
    clients = [one.test_client(), two.test_client()]
    answers = [clients[n % 2].get("/api/v1/health", headers={"Authorization": f"Bearer {a}"}) for n in range(3)]
    assert [r.status_code for r in answers] == [200, 200, 200]
    assert [r.headers["X-RateLimit-Remaining"] for r in answers] == ["2", "1", "0"]
    over = clients[1].get("/api/v1/health", headers={"Authorization": f"Bearer {a}"})
    assert_problem(over, 429, "hai:api:429")
    assert 1 <= int(over.headers["Retry-After"]) <= 60
    assert clients[0].get("/api/v1/health", headers={"Authorization": f"Bearer {b}"}).status_code == 200


def test_a_bad_rate_limit_setting_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="HAI_API_RATE_LIMIT"):
        next(_dashboard(f"sqlite:///{tmp_path}/bad.db", API_RATE_LIMIT=0))


# --- the command line ----------------------------------------------------------------------------------


def test_create_token_prints_the_token_once_and_it_works(app: Flask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HAI_DATABASE_URL", f"sqlite:///{tmp_path}/dash.db")
    accounts_of(app).create("ci-bot", "operator", generate_password_hash("ci-bot-password"))
    assert main(["create-token", "ci-bot", "--name", "pipeline", "--expires-days", "30"]) == 0
    out, err = capsys.readouterr()
    token = out.strip()
    assert re.fullmatch(r"hai_[A-Za-z0-9_-]{43}", token) and out == token + "\n"
    assert "'pipeline'" in err and "ci-bot" in err and "shown only this once" in err and token not in err
    response = app.test_client().post("/api/v1/tasks/trigger/missing", json={},
                                      headers={"Authorization": f"Bearer {token}"})
    assert_problem(response, 404)  # signed in as the operator: the task is what is missing
    assert not any(token in str(v) for row in _rows(app) for v in row.values())


@pytest.mark.parametrize(("argv", "field"), [
    (["create-token", "nobody"], "user"),
    (["create-token", "bad/name"], "user"),
    (["create-token", "admin", "--name", ""], "--name"),
    (["create-token", "admin", "--name", "a\x1bb"], "--name"),
    (["create-token", "admin", "--expires-days", "0"], "--expires-days"),
    (["create-token", "admin", "--expires-days", "²"], "--expires-days"),
    (["create-token", "admin", "--expires-days", "9" * 40], "--expires-days"),
    (["create-token", "admin", "--expires-days", "-3"], "--expires-days"),
])
def test_create_token_refuses_bad_arguments_by_name(app: Flask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str], argv: list[str],
                                                    field: str) -> None:
    monkeypatch.setenv("HAI_DATABASE_URL", f"sqlite:///{tmp_path}/dash.db")
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"error: hai:scheduler:012 {field}: ") and err.count("\n") == 1, err
    assert _rows(app) == []


# --- the Users page ------------------------------------------------------------------------------------


def _post(client: FlaskClient, path: str, **form: str) -> object:
    return client.post(path, data={"csrf_token": csrf_token(client, "/users/manage/admin"), **form})


def test_an_admin_creates_a_token_on_the_users_page_and_revokes_it(app: Flask, client: FlaskClient,
                                                                    auth: Auth) -> None:
    accounts_of(app).create("grafana", "viewer", generate_password_hash("grafana-password"))
    auth.login("admin", ADMIN_PASSWORD)
    page = client.get("/users/manage/grafana").get_data(as_text=True)
    assert "API tokens" in page and "grafana has no API token" in page
    refused = _post(client, "/users/tokens/new/grafana", name="dash", expires_days="٣")
    assert refused.status_code == 400 and "A whole number of days" in html.unescape(refused.get_data(as_text=True))
    refused = _post(client, "/users/tokens/new/grafana", name="a\x1bb", expires_days="")
    assert refused.status_code == 400 and "printable" in refused.get_data(as_text=True)
    assert _rows(app) == []
    posted = _post(client, "/users/tokens/new/grafana", name="dashboards", expires_days="90")
    assert posted.status_code == 303  # post/redirect/get: the page that shows it once (test_token_prg.py)
    shown = client.get(posted.headers["Location"])
    body = shown.get_data(as_text=True)
    assert shown.status_code == 200 and shown.headers["Cache-Control"] == "no-store"
    token = re.search(r"data-token>(hai_[A-Za-z0-9_-]{43})<", body)
    assert token, body
    headers = {"Authorization": f"Bearer {token.group(1)}"}
    assert app.test_client().get("/api/v1/tasks", headers=headers).status_code == 200
    listed = client.get("/users/manage/grafana").get_data(as_text=True)
    assert "dashboards" in listed and token.group(1) not in listed
    [stored] = _tokens(app).list_for("grafana")  # type: ignore[attr-defined]
    assert stored.last_used_at is not None
    revoked = _post(client, f"/users/tokens/revoke/grafana/{stored.id}")
    assert revoked.status_code == 303
    assert_problem(app.test_client().get("/api/v1/tasks", headers=headers), 401)
    again = _post(client, f"/users/tokens/revoke/grafana/{stored.id}")
    assert again.status_code == 303 and "no active token" in client.get("/users/manage/grafana").get_data(as_text=True)
    created, revoke = audit_of(app).list(action="token.create"), audit_of(app).list(action="token.revoke")
    assert [(e.actor, e.target) for e in created + revoke] == [("admin", "grafana"), ("admin", "grafana")]
    assert all(token.group(1) not in str((e.before, e.after)) for e in created + revoke)
    assert created[0].after["token_id"] == stored.id and revoke[0].before["name"] == "dashboards"
