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
from sqlalchemy import select, update

from scheduler_core.db.account_tables import team_grants, user_sessions, users
from scheduler_core.db.tables import audit_log
from scheduler_core.errors import ConfigError
from scheduler_core.oidc_settings import GroupRole, OidcSettings, SignOn
from scheduler_core.runtime.api_tokens import ApiTokens
from scheduler_core.settings import read_settings
from tests.conftest import TestDatabase
from tests.helpers.http_server import RecordingServer
from tests.helpers.oidc_provider import (
    MISCHIEF_KINDS,
    OidcProvider,
    authorize_until_callback,
    require_oidc_provider,
)
from tests.webapp.conftest import ADMIN_PASSWORD, _dashboard, csrf_token
from webapp.identity_provider import MAX_ANSWER, BoundedSession, discover

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


def _grants(app: Flask, name: str) -> dict[str, str]:
    return {r.team: r.role for r in _rows(app, team_grants) if r.username == name}


def _user(app: Flask, name: str) -> Any:
    return next((u for u in _rows(app, users) if u.username == name), None)


def test_a_person_signs_on_and_is_created_with_the_role_their_groups_grant(
        sso_app: Flask, provider: OidcProvider) -> None:
    client = sso_app.test_client()
    done = _signed_on(client, provider, "alice", start="/login/sso?next=/tasks/")
    assert (done.status_code, done.headers["Location"]) == (302, "/tasks/")
    assert client.get("/tasks/").status_code == 200
    alice = _user(sso_app, "alice")
    assert (alice.role, alice.disabled, len(alice.identity)) == (None, False, 64)  # no global role: ...
    assert _grants(sso_app, "alice") == {"default": "operator"}  # ... operator in the team her group names
    assert alice.password_hash == "!sign-on"
    assert [(e.actor, e.action, e.after) for e in _rows(sso_app, audit_log)] == [
        ("alice", "user.create", {"role": None, "teams": {"default": "operator"}})]
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


@pytest.mark.parametrize("route", ["/ok", "/text", f"/huge/{MAX_ANSWER + 1}"])
def test_a_key_set_that_is_no_key_set_or_too_large_signs_no_one_on(
        sso_app: Flask, provider: OidcProvider, route: str) -> None:
    """The provider's JWKS as Authlib reads it (through ``BoundedSession``): a JSON object that is
    no key set, no JSON at all, or more than the dashboard reads refuses the sign-on, saying so."""
    with RecordingServer() as keys:
        client = sso_app.test_client()
        callback = _walk(client, provider, "bob")
        oauth_client = sso_app.extensions["hai_oidc"][1]
        assert oauth_client.client_cls is BoundedSession  # what Authlib asks the provider is read bounded
        oauth_client.server_metadata.pop("jwks", None)
        oauth_client.server_metadata["jwks_uri"] = keys.url(route)
        assert "Single sign-on failed" in _refusal(client, client.get(callback))
        assert [r.path for r in keys.requests] == [route]  # the key set was asked for, once
    assert _user(sso_app, "bob") is None and _rows(sso_app, user_sessions) == []


def test_groups_that_grant_no_role_sign_no_one_on(sso_app: Flask, provider: OidcProvider) -> None:
    client = sso_app.test_client()
    page = _refusal(client, _signed_on(client, provider, "carol"))
    assert "grant no role" in page and "Sign in as someone else" in page
    assert _user(sso_app, "carol") is None


def test_a_group_mapped_to_a_team_this_dashboard_lacks_signs_no_one_on_until_the_team_exists(
        database: TestDatabase, provider: OidcProvider) -> None:
    sign_on = SignOn(OidcSettings(client_id=CLIENT_ID, client_secret=CLIENT_SECRET, issuer=provider.issuer,
                                  group_roles=(GroupRole("ops", "payments", "operator"),)), True)
    for app in _dashboard(database.url, SIGN_ON=sign_on, SECRET_KEY="sso-" + "k" * 32):
        client = app.test_client()
        page = _refusal(client, _signed_on(client, provider, "alice"))
        assert "a team this dashboard does not have" in page and "payments" in page
        assert _user(app, "alice") is None
        app.extensions["hai_accounts"].create_team("payments")
        assert _signed_on(client, provider, "alice").status_code == 302
        assert _grants(app, "alice") == {"payments": "operator"}


def test_a_local_account_is_never_taken_over_by_a_person_of_the_same_name(
        sso_app: Flask, provider: OidcProvider) -> None:
    client = sso_app.test_client()
    page = _refusal(client, _signed_on(client, provider, "admin"))
    message = page.split('id="sso-error"')[1].split("</div>")[0]
    assert "is another user" in message and "&#39;admin&#39;" not in message  # which local names exist: not said
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
    assert _grants(sso_app, "alice") == {"default": "viewer"}
    assert [(e.action, e.before, e.after) for e in _rows(sso_app, audit_log) if e.action == "user.role"] == [
        ("user.role", {"role": None, "teams": {"default": "operator"}}, {"role": None, "teams": {"default": "viewer"}})]
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
def test_a_provider_that_does_not_agree_stops_serve_by_the_setting(
        provider: OidcProvider, change: dict[str, Any], field: str, says: str) -> None:
    """What ``serve`` asks before any worker starts (``discover``)."""
    if change.get("issuer") == "ISSUER/":
        change = {"issuer": provider.issuer + "/"}
    settings = _sign_on(provider, **change).oidc
    assert settings is not None
    with pytest.raises(ConfigError) as caught:
        discover(settings, "development")
    assert caught.value.field == field and says in caught.value.message, caught.value


def test_a_worker_boots_while_the_provider_is_down_and_local_accounts_still_sign_in(
        tmp_path: Any, provider: OidcProvider) -> None:
    """A worker never fails to boot for the provider (a restart during its outage would stop the
    scheduler): single sign-on says it is unavailable, local accounts sign in."""
    for app in _dashboard(f"sqlite:///{tmp_path}/dash.db", SIGN_ON=_sign_on(provider, issuer="http://127.0.0.1:9"),
                          SECRET_KEY="sso-" + "k" * 32):
        client = app.test_client()
        page = _refusal(client, client.get("/login/sso"))
        assert "Single sign-on is unavailable" in page and "cannot connect" in page
        assert "Local accounts still sign in" in page
        client.post("/login", data={"username": "admin", "password": ADMIN_PASSWORD, "csrf_token": csrf_token(client)})
        assert client.get("/").status_code == 200


def test_the_users_page_says_who_signs_on_and_offers_no_password_or_role_for_them(
        sso_app: Flask, provider: OidcProvider) -> None:
    _signed_on(sso_app.test_client(), provider, "alice")
    admin = sso_app.test_client()
    admin.post("/login", data={"username": "admin", "password": ADMIN_PASSWORD, "csrf_token": csrf_token(admin)})
    page = admin.get("/users/manage/alice").get_data(as_text=True)
    assert "with single sign-on" in page
    assert "Reset password" not in page and "Change role" not in page and "Set team role" not in page
    assert "with a password" in admin.get("/users/manage/admin").get_data(as_text=True)
    before = _user(sso_app, "alice")
    token = csrf_token(admin, "/users/manage/alice")
    for action, form in (("/users/role/alice", {"role": "admin"}), ("/users/team-role/alice", {"team": "default",
                                                                                            "role": "admin"}),
                         ("/users/password/alice", {"password": "p" * 12, "confirm": "p" * 12})):
        refused = admin.post(action, data={"csrf_token": token, "expected_updated_at": before.updated_at, **form})
        assert refused.status_code == 400, (action, refused.status_code)
        assert "identity provider" in refused.get_data(as_text=True)
    after = _user(sso_app, "alice")
    assert (after.role, after.password_hash, after.updated_at) == (None, "!sign-on", before.updated_at)
    assert _grants(sso_app, "alice") == {"default": "operator"}


def test_sign_in_as_someone_else_asks_the_provider_who_you_are_again(sso_app: Flask, provider: OidcProvider) -> None:
    client = sso_app.test_client()
    authorize = client.get("/login/sso?again=1&next=/tasks/").headers["Location"]
    assert parse_qs(urlsplit(authorize).query)["prompt"] == ["login"]
    assert "prompt" not in parse_qs(urlsplit(client.get("/login/sso").headers["Location"]).query)


def test_a_person_whose_groups_grant_nothing_now_loses_every_session_and_api_token(
        sso_app: Flask, provider: OidcProvider) -> None:
    client = sso_app.test_client()
    _signed_on(client, provider, "bob")
    other_browser = sso_app.test_client()
    _signed_on(other_browser, provider, "bob")
    secret = ApiTokens(sso_app.extensions["hai_engine"]).create("bob", "ci").secret
    api = sso_app.test_client()
    assert api.get("/api/v1/tasks", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    provider.set_user("bob", groups=["unrelated"])
    assert client.get("/").status_code == 302
    assert other_browser.get("/").status_code == 302  # every session of his, not only this one
    assert api.get("/api/v1/tasks", headers={"Authorization": f"Bearer {secret}"}).status_code == 401
    [lost] = [e for e in _rows(sso_app, audit_log) if e.action == "user.access_lost"]
    assert (lost.target, lost.after) == ("bob", {"sessions_ended": 2, "tokens_revoked": 1})
    provider.set_user("bob", groups=["platform"])  # back in a group: he signs on again
    assert _signed_on(sso_app.test_client(), provider, "bob").headers["Location"] == "/"


def test_an_access_token_the_provider_no_longer_accepts_ends_the_session(
        sso_app: Flask, provider: OidcProvider) -> None:
    client = sso_app.test_client()
    _signed_on(client, provider, "alice")
    with sso_app.extensions["hai_engine"].begin() as conn:
        [row] = conn.execute(select(user_sessions.c.id, user_sessions.c.sign_on)).all()
        conn.execute(update(user_sessions).where(user_sessions.c.id == row.id).values(
            sign_on={**row.sign_on, "at": "revoked-or-expired"}))
    assert client.get("/").status_code == 302
    assert _user(sso_app, "alice").disabled is False  # a token's end is not the person's: nothing else changes


def test_the_access_token_stays_on_the_server_and_abandoned_starts_do_not_grow_the_cookie(
        sso_app: Flask, provider: OidcProvider) -> None:
    client = sso_app.test_client()
    for _ in range(12):
        client.get("/login/sso")
    cookie = client.get_cookie("session")
    assert cookie is not None and len(cookie.value) < 1600, len(cookie.value)
    _signed_on(client, provider, "alice")
    [state] = [r.sign_on for r in _rows(sso_app, user_sessions)]
    assert set(state) == {"sub", "at", "seen", "answered", "retry"} and state["at"]
    assert state["at"] not in (client.get_cookie("session").value or "")


def test_a_name_that_differs_only_in_case_from_a_local_account_is_refused(
        sso_app: Flask, provider: OidcProvider) -> None:
    provider.set_user("Admin", groups=["platform"])
    client = sso_app.test_client()
    assert "is another user" in _refusal(client, _signed_on(client, provider, "Admin"))
    assert _user(sso_app, "Admin") is None


@pytest.mark.parametrize("error", ["access_denied", "Your account is locked. Call +1-555-0100 now\r\nFAKE LOG LINE"])
def test_what_the_provider_sends_back_as_an_error_is_never_shown_as_it_is(
        sso_app: Flask, provider: OidcProvider, error: str, caplog: pytest.LogCaptureFixture) -> None:
    client = sso_app.test_client()
    state = parse_qs(urlsplit(client.get("/login/sso").headers["Location"]).query)["state"][0]
    page = _refusal(client, client.get("/login/sso/callback", query_string={"error": error, "state": state,
                                                                             "error_description": error}))
    assert "Call +1-555" not in page
    assert ("cancelled or refused" in page) == (error == "access_denied")
    assert not any("\nFAKE LOG LINE" in r.getMessage() for r in caplog.records)


def test_sign_on_in_production_needs_the_public_url() -> None:
    environ = {"HAI_DATABASE_URL": "postgresql://h/db", "HAI_ENV": "production", "HAI_OIDC_ISSUER": "https://id.test",
               "HAI_OIDC_CLIENT_ID": "c", "HAI_OIDC_CLIENT_SECRET": "s", "HAI_OIDC_GROUP_ROLES": "g=default:viewer"}
    with pytest.raises(ConfigError) as caught:
        read_settings(environ=environ)
    assert caught.value.field == "HAI_PUBLIC_URL"
    assert read_settings(environ={**environ, "HAI_PUBLIC_URL": "https://hai.test"}).sign_on.oidc is not None
