"""Single sign-on against a real OpenID provider (the npm ``oidc-provider``, started here on 127.0.0.1:
tests/helpers/oidc_provider.py): the dashboard (Flask's test client as the browser's side of the
dashboard, ``requests`` as its side of the provider) signs a person on with the code flow, PKCE,
state and nonce, and refuses every token or answer that is not what the flow asked for. Each refusal
leaves no session and no user behind."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from scheduler_core.db.tables import audit_log, user_sessions, users
from scheduler_core.errors import ConfigError
from scheduler_core.oidc_settings import GroupRole, OidcSettings, SignOn
from tests.conftest import TestDatabase
from tests.helpers.oidc_provider import (
    MISCHIEF_KINDS,
    OidcProvider,
    authorize_until_callback,
    require_oidc_provider,
)
from tests.webapp.conftest import ADMIN_PASSWORD, _dashboard, csrf_token
from webapp import create_app

CLIENT_ID, CLIENT_SECRET = "hai-dashboard", "dashboard-secret-for-tests"
CALLBACK = "http://localhost/login/sso/callback"
GROUP_ROLES = (GroupRole("ops", "default", "operator"), GroupRole("platform", "*", "admin"),
               GroupRole("readers", "default", "viewer"))
PEOPLE: dict[str, Any] = {
    "alice": {"groups": ["ops", "unrelated"], "email": "alice@example.test", "name": "Alice"},
    "bob": {"groups": ["platform"], "email": "bob@example.test", "name": "Bob"},
    "carol": {"groups": ["unrelated"], "email": "carol@example.test", "name": "Carol"},
    "admin": {"groups": ["platform"], "email": "mallory@example.test", "name": "Not the admin"},
}


@pytest.fixture(scope="module")
def provider() -> Iterator[OidcProvider]:
    require_oidc_provider()
    with OidcProvider.start(clients=[{"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
                                      "redirect_uris": [CALLBACK],
                                      "post_logout_redirect_uris": ["http://localhost/login"]}],
                            users=PEOPLE) as op:
        yield op


@pytest.fixture(autouse=True)
def _people_as_declared(provider: OidcProvider) -> None:
    for name, person in PEOPLE.items():
        provider.set_user(name, **person)
    provider.mischief(None)


def _sign_on(provider: OidcProvider, **settings: Any) -> SignOn:
    local = settings.pop("local", True)
    settings.setdefault("issuer", provider.issuer)
    return SignOn(OidcSettings(client_id=CLIENT_ID, client_secret=CLIENT_SECRET, group_roles=GROUP_ROLES,
                               **settings), local)


@pytest.fixture
def sso_app(database: TestDatabase, provider: OidcProvider) -> Iterator[Flask]:
    """The dashboard on each database, signing on with the provider; groups read again on every request."""
    yield from _dashboard(database.url, SIGN_ON=_sign_on(provider, refresh_s=0), SECRET_KEY="sso-" + "k" * 32)


def _walk(client: FlaskClient, provider: OidcProvider, who: str, start: str = "/login/sso") -> str:
    """From the dashboard's sign-on link to the callback URL the provider sends the browser to (not yet
    requested): its path and query."""
    started = client.get(start)
    assert started.status_code == 302, started.get_data(as_text=True)
    authorize = started.headers["Location"]
    assert authorize.startswith(provider.issuer)
    query = parse_qs(urlsplit(authorize).query)
    assert query["code_challenge_method"] == ["S256"] and query["nonce"] and query["state"]
    callback = authorize_until_callback(requests.Session(), authorize, who)
    assert callback.startswith(CALLBACK), callback
    parts = urlsplit(callback)
    return f"{parts.path}?{parts.query}"


def _signed_on(client: FlaskClient, provider: OidcProvider, who: str, start: str = "/login/sso") -> Any:
    return client.get(_walk(client, provider, who, start))


def _refusal(client: FlaskClient, answer: Any) -> str:
    """A refused sign-on goes back to the sign-in page (not left on the callback's address), which
    says why once: the page's text."""
    assert answer.status_code == 302 and answer.headers["Location"].startswith("/login"), answer.status_code
    page = client.get(answer.headers["Location"])
    assert page.status_code == 200
    text: str = page.get_data(as_text=True)
    assert 'id="sso-error"' in text and 'aria-invalid' not in text  # the password form is not what failed
    assert 'id="sso-error"' not in client.get("/login").get_data(as_text=True)  # once
    return text


def _rows(app: Flask, table: Any) -> list[Any]:
    with app.extensions["hai_engine"].connect() as conn:
        rows = list(conn.execute(select(table)))
        conn.rollback()
    return rows


def _user(app: Flask, name: str) -> Any:
    return next((u for u in _rows(app, users) if u.username == name), None)


def test_a_person_signs_on_and_is_created_with_the_role_their_groups_grant(
        sso_app: Flask, provider: OidcProvider) -> None:
    client = sso_app.test_client()
    done = _signed_on(client, provider, "alice", start="/login/sso?next=/tasks/")
    assert (done.status_code, done.headers["Location"]) == (302, "/tasks/")
    assert client.get("/tasks/").status_code == 200
    alice = _user(sso_app, "alice")
    assert (alice.role, alice.disabled, len(alice.identity)) == ("operator", False, 64)
    assert alice.password_hash == "!sign-on"
    assert [(e.actor, e.action, e.after) for e in _rows(sso_app, audit_log)] == [
        ("alice", "user.create", {"role": "operator"})]
    # operator, not admin: the users page is not hers
    assert client.get("/users/").status_code == 403
    # a second sign-on is the same user (by issuer and subject), not a second one
    again = sso_app.test_client()
    assert _signed_on(again, provider, "alice").status_code == 302
    assert sum(1 for u in _rows(sso_app, users) if u.identity) == 1


def test_an_outside_next_is_dropped_on_the_way_through_the_provider(sso_app: Flask, provider: OidcProvider) -> None:
    client = sso_app.test_client()
    done = _signed_on(client, provider, "bob", start="/login/sso?next=//evil.example/x")
    assert done.headers["Location"] == "/"


def test_a_callback_in_another_browser_is_refused_by_its_state(sso_app: Flask, provider: OidcProvider) -> None:
    callback = _walk(sso_app.test_client(), provider, "alice")
    other = sso_app.test_client()
    assert "state mismatch" in _refusal(other, other.get(callback))
    assert other.get("/").status_code == 302  # not signed in
    assert _user(sso_app, "alice") is None


def test_a_replayed_code_is_refused_by_the_provider(sso_app: Flask, provider: OidcProvider) -> None:
    client = sso_app.test_client()
    callback = _walk(client, provider, "alice")
    assert client.get(callback).status_code == 302
    code = parse_qs(urlsplit(callback).query)["code"][0]
    attacker = sso_app.test_client()
    state = parse_qs(urlsplit(attacker.get("/login/sso").headers["Location"]).query)["state"][0]
    provider.clear_token_log()
    replayed = attacker.get(f"/login/sso/callback?code={code}&state={state}")
    assert "used already" in _refusal(attacker, replayed)
    assert [entry["outcome"] for entry in provider.token_log()] == ["invalid_grant"]
    assert attacker.get("/").status_code == 302


@pytest.mark.parametrize("mischief", MISCHIEF_KINDS)
def test_an_id_token_that_is_not_the_one_asked_for_is_refused(
        sso_app: Flask, provider: OidcProvider, mischief: Any) -> None:
    client = sso_app.test_client()
    callback = _walk(client, provider, "bob")
    provider.mischief(mischief)
    assert "Single sign-on failed" in _refusal(client, client.get(callback))
    assert client.get("/").status_code == 302
    assert _user(sso_app, "bob") is None
    assert _rows(sso_app, user_sessions) == []


def test_groups_that_grant_no_role_sign_no_one_on(sso_app: Flask, provider: OidcProvider) -> None:
    client = sso_app.test_client()
    page = _refusal(client, _signed_on(client, provider, "carol"))
    assert "grant no role" in page and "Sign in as someone else" in page
    assert _user(sso_app, "carol") is None


def test_a_local_account_is_never_taken_over_by_a_person_of_the_same_name(
        sso_app: Flask, provider: OidcProvider) -> None:
    client = sso_app.test_client()
    assert "name of another user" in _refusal(client, _signed_on(client, provider, "admin"))
    admin = _user(sso_app, "admin")
    assert admin.identity is None and admin.role == "admin"
    assert client.get("/users/").status_code == 302  # not signed in as anyone


def test_a_person_who_signs_on_has_no_password_here(sso_app: Flask, provider: OidcProvider) -> None:
    _signed_on(sso_app.test_client(), provider, "alice")
    client = sso_app.test_client()
    for password in ("!sign-on", "", "any password"):
        answer = client.post("/login", data={"username": "alice", "password": password,
                                             "csrf_token": csrf_token(client)})
        assert answer.status_code in (400, 401)
    accounts = sso_app.extensions["hai_accounts"]
    alice = accounts.get("alice")
    with pytest.raises(ConfigError) as caught:
        accounts.reset_password("alice", "pbkdf2:sha256:1$x$y", alice.updated_at)
    assert caught.value.field == "password"
    with pytest.raises(ConfigError) as caught:
        accounts.set_role("alice", "admin", alice.updated_at)
    assert caught.value.field == "role"


def test_groups_are_read_again_and_a_removed_group_ends_the_session(sso_app: Flask, provider: OidcProvider) -> None:
    client = sso_app.test_client()
    _signed_on(client, provider, "alice")
    assert client.get("/").status_code == 200
    provider.set_user("alice", groups=["readers"])  # operator -> viewer
    assert client.get("/").status_code == 200
    assert _user(sso_app, "alice").role == "viewer"
    assert [(e.action, e.before, e.after) for e in _rows(sso_app, audit_log) if e.action == "user.role"] == [
        ("user.role", {"role": "operator"}, {"role": "viewer"})]
    provider.set_user("alice", groups=["unrelated"])  # nothing granted: the next request is signed out
    answer = client.get("/")
    assert answer.status_code == 302 and answer.headers["Location"].startswith("/login")
    assert [s for s in _rows(sso_app, user_sessions) if s.username == "alice"] == []


def test_a_disabled_user_cannot_sign_on(sso_app: Flask, provider: OidcProvider) -> None:
    _signed_on(sso_app.test_client(), provider, "alice")
    accounts = sso_app.extensions["hai_accounts"]
    accounts.set_disabled("alice", True, accounts.get("alice").updated_at)
    client = sso_app.test_client()
    assert "disabled" in _refusal(client, _signed_on(client, provider, "alice"))
    assert client.get("/").status_code == 302


def test_logout_ends_the_session_here_and_at_the_provider(sso_app: Flask, provider: OidcProvider) -> None:
    client = sso_app.test_client()
    _signed_on(client, provider, "alice")
    cookie = client.get_cookie("session")
    assert cookie is not None
    out = client.post("/logout", data={"csrf_token": csrf_token(client, "/")})
    assert out.status_code == 302
    target = urlsplit(out.headers["Location"])
    assert f"{target.scheme}://{target.netloc}" == provider.issuer
    query = parse_qs(target.query)
    assert query["client_id"] == [CLIENT_ID] and query["post_logout_redirect_uri"] == ["http://localhost/login"]
    assert "You are signed out." in client.get("/login").get_data(as_text=True)
    copy = sso_app.test_client()
    copy.set_cookie("session", cookie.value)
    assert copy.get("/").status_code == 302  # the session ended on the server: a copy of the cookie is nothing


def test_local_accounts_turned_off(database: TestDatabase, provider: OidcProvider) -> None:
    for app in _dashboard(database.url, SIGN_ON=_sign_on(provider, local=False), SECRET_KEY="sso-" + "k" * 32):
        client = app.test_client()
        page = client.get("/login").get_data(as_text=True)
        assert "Sign in with single sign-on" in page and 'name="password"' not in page
        refused = client.post("/login", data={"username": "admin", "password": ADMIN_PASSWORD,
                                              "csrf_token": csrf_token(client, "/login?x=1")})
        assert refused.status_code == 403
        assert client.get("/").status_code == 302


def test_a_local_session_ends_once_local_accounts_are_turned_off(
        database: TestDatabase, provider: OidcProvider) -> None:
    secret = "sso-" + "k" * 32
    for app in _dashboard(database.url, SIGN_ON=_sign_on(provider), SECRET_KEY=secret):
        client = app.test_client()
        client.post("/login", data={"username": "admin", "password": ADMIN_PASSWORD, "csrf_token": csrf_token(client)})
        assert client.get("/").status_code == 200
        cookie = client.get_cookie("session")
    for app in _dashboard(database.url, SIGN_ON=_sign_on(provider, local=False), SECRET_KEY=secret):
        client = app.test_client()
        client.set_cookie("session", cookie.value)
        assert client.get("/").status_code == 302


@pytest.mark.parametrize(("change", "field", "says"), [
    ({"issuer": "http://127.0.0.1:9"}, "HAI_OIDC_ISSUER", "no discovery document"),
    ({"groups_claim": "teams"}, "HAI_OIDC_GROUPS_CLAIM", "supports no claim"),
    ({"username_claim": "nickname_x"}, "HAI_OIDC_USERNAME_CLAIM", "supports no claim"),
    ({"scopes": ("openid", "offline_everything")}, "HAI_OIDC_SCOPES", "supports no scope"),
    ({"issuer": "ISSUER/"}, "HAI_OIDC_ISSUER", "character for character"),
])
def test_a_provider_that_does_not_agree_stops_the_dashboard_at_start(
        tmp_path: Any, provider: OidcProvider, change: dict[str, Any], field: str, says: str) -> None:
    if change.get("issuer") == "ISSUER/":
        change = {"issuer": provider.issuer + "/"}
    with pytest.raises(ConfigError) as caught:
        create_app({"DATABASE_URL": f"sqlite:///{tmp_path}/dash.db", "ADMIN_PASSWORD": ADMIN_PASSWORD,
                    "TESTING": True, "SIGN_ON": _sign_on(provider, **change)})
    assert caught.value.field == field and says in caught.value.message, caught.value


def test_the_users_page_says_who_signs_on_and_offers_no_password_or_role_for_them(
        sso_app: Flask, provider: OidcProvider) -> None:
    _signed_on(sso_app.test_client(), provider, "alice")
    admin = sso_app.test_client()
    admin.post("/login", data={"username": "admin", "password": ADMIN_PASSWORD, "csrf_token": csrf_token(admin)})
    page = admin.get("/users/manage/alice").get_data(as_text=True)
    assert "with single sign-on" in page
    assert "Reset password" not in page and "Change role" not in page
    assert "with a password" in admin.get("/users/manage/admin").get_data(as_text=True)
    before = _user(sso_app, "alice")
    token = csrf_token(admin, "/users/manage/alice")
    for action, form in (("/users/role/alice", {"role": "admin"}),
                         ("/users/password/alice", {"password": "p" * 12, "confirm": "p" * 12})):
        refused = admin.post(action, data={"csrf_token": token, "expected_updated_at": before.updated_at, **form})
        assert refused.status_code == 400, (action, refused.status_code)
        assert "identity provider" in refused.get_data(as_text=True)
    after = _user(sso_app, "alice")
    assert (after.role, after.password_hash, after.updated_at) == ("operator", "!sign-on", before.updated_at)


def test_sign_in_as_someone_else_asks_the_provider_who_you_are_again(sso_app: Flask, provider: OidcProvider) -> None:
    client = sso_app.test_client()
    authorize = client.get("/login/sso?again=1&next=/tasks/").headers["Location"]
    assert parse_qs(urlsplit(authorize).query)["prompt"] == ["login"]
    assert "prompt" not in parse_qs(urlsplit(client.get("/login/sso").headers["Location"]).query)
