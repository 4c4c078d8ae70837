"""What the identity provider answers is untrusted input (webapp/identity_provider.py): bounded
in size and time, ID tokens only with an asymmetric signature whatever discovery lists, and a
provider that does not answer never stops a worker; it is asked again, backing off. A session
keeps its role through a short outage and ends after a long one."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests
from flask import Flask
from sqlalchemy import select, update

from scheduler_core.db.account_tables import user_sessions
from scheduler_core.errors import ConfigError
from scheduler_core.oidc_settings import GroupRole, OidcSettings, SignOn
from tests.conftest import TestDatabase
from tests.helpers.http_server import RecordingServer
from tests.helpers.oidc_provider import OidcProvider, authorize_until_callback, require_oidc_provider
from tests.webapp.conftest import _dashboard
from webapp import identity_provider
from webapp.identity_provider import MAX_ANSWER, AnswerTooLarge, BoundedSession, Provider, discover, fetch_json
from webapp.oidc import UNREACHABLE_GRACE_MS


class DocumentServer:
    """Serves ``document`` (a JSON value) at the discovery address, or ``status`` without one."""

    def __init__(self) -> None:
        self.document: Any = None
        self.status = 503
        self.asked = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.asked += 1
                body = json.dumps(owner.document).encode() if owner.status == 200 else b"{}"
                self.send_response(owner.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def agree(self, **changes: Any) -> None:
        self.status = 200
        endpoint = f"{self.issuer}/x"
        self.document = {"issuer": self.issuer, "authorization_endpoint": endpoint, "token_endpoint": endpoint,
                         "jwks_uri": endpoint, "userinfo_endpoint": endpoint, **changes}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def documents() -> Iterator[DocumentServer]:
    server = DocumentServer()
    try:
        yield server
    finally:
        server.close()


def _settings(issuer: str) -> OidcSettings:
    return OidcSettings(issuer=issuer, client_id="c", client_secret="s",
                        group_roles=(GroupRole("ops", "default", "operator"),))


def test_answers_are_read_within_a_size_and_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identity_provider, "TIMEOUT_S", 2)
    with RecordingServer() as server:
        assert fetch_json(server.url("/ok"), 100).body == {"ok": True}
        assert fetch_json(server.url("/huge/100000"), 64 * 1024).body is None  # read no further than the cap
        assert fetch_json(server.url("/status/503"), 100).status == 503
        with pytest.raises(requests.Timeout):
            fetch_json(server.url("/trickle/30"), 100)  # one byte a second: each read is quick, the whole is not
        assert str(server.wait_for_outcome(timeout=5)).startswith("client gone"), "it waited for the whole answer"
        monkeypatch.setattr(identity_provider, "TIMEOUT_S", 0.5)  # a read waits longer than the socket's timeout
        with pytest.raises(requests.Timeout):  # requests' error, as the callers catch: not urllib3's
            fetch_json(server.url("/trickle/30"), 100)


def test_what_authlib_asks_the_provider_is_read_within_a_size_and_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The token endpoint's and the JWKS answers (``BoundedSession``, the session Authlib opens)."""
    monkeypatch.setattr(identity_provider, "TIMEOUT_S", 2)
    with RecordingServer() as server, BoundedSession(client_id="c") as session:
        def get(path: str) -> requests.Response:  # as Authlib asks for the JWKS: no token sent
            return session.request("GET", server.url(path), withhold_token=True)

        assert get("/ok").json() == {"ok": True}
        assert len(get(f"/huge/{MAX_ANSWER}").content) == MAX_ANSWER
        with pytest.raises(AnswerTooLarge):
            get(f"/huge/{MAX_ANSWER + 1}")
        with pytest.raises(requests.Timeout):
            get("/trickle/30")  # one byte a second: each read is quick, the whole is not
        assert str(server.wait_for_outcome(timeout=5)).startswith("client gone"), "it waited for the whole answer"


@pytest.mark.parametrize(("listed", "kept"), [
    (None, ["RS256"]),  # OpenID Discovery's default
    (["RS256", "none", "HS256"], ["RS256"]),
    (["ES256", "PS256", "HS512"], ["ES256", "PS256"]),
])
def test_id_tokens_are_accepted_only_with_an_asymmetric_signature(
        documents: DocumentServer, listed: Any, kept: list[str]) -> None:
    documents.agree(**({} if listed is None else {"id_token_signing_alg_values_supported": listed}))
    assert discover(_settings(documents.issuer), "development")["id_token_signing_alg_values_supported"] == kept


def test_a_provider_that_signs_with_none_or_a_shared_secret_only_is_refused(documents: DocumentServer) -> None:
    documents.agree(id_token_signing_alg_values_supported=["none", "HS256"])
    with pytest.raises(ConfigError) as caught:
        discover(_settings(documents.issuer), "development")
    assert caught.value.field == "HAI_OIDC_ISSUER" and "asymmetric" in caught.value.message


@pytest.mark.parametrize("endpoint", ["userinfo_endpoint", "end_session_endpoint"])
def test_plain_http_endpoints_are_refused_outside_development(documents: DocumentServer, endpoint: str) -> None:
    documents.agree()
    https = {k: v if k == "issuer" else v.replace("http://", "https://") for k, v in documents.document.items()}
    documents.document = {**https, endpoint: "http://id.example.test/x"}  # every other endpoint https
    with pytest.raises(ConfigError) as caught:
        discover(_settings(documents.issuer), "production")
    assert endpoint in caught.value.message


def test_a_worker_asks_again_backing_off_until_the_provider_answers(
        documents: DocumentServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identity_provider, "RETRY_S", (0, 0))
    provider = Provider(_settings(documents.issuer), "development")
    assert provider.metadata() is None and "HTTP 503" in (provider.problem or "")
    documents.agree()
    assert provider.metadata() is not None and provider.problem is None
    monkeypatch.setattr(identity_provider, "RETRY_S", (60, 60))
    later = Provider(_settings(documents.issuer + "/"), "development")  # does not agree: asked again in 60 s
    assert later.metadata() is None
    documents.close()
    assert later.metadata() is None  # not asked again yet: no request goes out (the server is gone)


@pytest.fixture
def own_provider() -> Iterator[OidcProvider]:
    require_oidc_provider()
    with OidcProvider.start(clients=[{"client_id": "c", "client_secret": "s",
                                      "redirect_uris": ["http://localhost/login/sso/callback"]}],
                            users={"alice": {"groups": ["ops"]}}) as provider:
        yield provider


def test_a_session_keeps_its_role_through_a_short_outage_and_ends_after_a_long_one(
        database: TestDatabase, own_provider: OidcProvider) -> None:
    settings = OidcSettings(issuer=own_provider.issuer, client_id="c", client_secret="s", refresh_s=0,
                            group_roles=(GroupRole("ops", "default", "operator"),))
    for app in _dashboard(database.url, SIGN_ON=SignOn(settings), SECRET_KEY="idp-" + "k" * 32):
        client = app.test_client()
        authorize = client.get("/login/sso").headers["Location"]
        callback = authorize_until_callback(requests.Session(), authorize, "alice")
        assert client.get(callback.removeprefix("http://localhost")).headers["Location"] == "/"
        own_provider.stop()
        assert client.get("/").status_code == 200  # the role last read holds
        state = _state(app)
        assert state["retry"] > state["answered"]  # and the provider is not asked on every request meanwhile
        _set_state(app, {**state, "answered": state["answered"] - UNREACHABLE_GRACE_MS - 1, "retry": 0})
        assert client.get("/").status_code == 302  # too long without an answer: signed out


def _state(app: Flask) -> dict[str, Any]:
    with app.extensions["hai_engine"].connect() as conn:
        state: dict[str, Any] = conn.execute(select(user_sessions.c.sign_on)).scalar_one()
        conn.rollback()
    return state


def _set_state(app: Flask, state: dict[str, Any]) -> None:
    with app.extensions["hai_engine"].begin() as conn:
        conn.execute(update(user_sessions).values(sign_on=state))


def test_the_header_every_response_carries_never_asks_the_provider(
        documents: DocumentServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CSP's form-action names the provider from the document the worker has: a page's
    response does not wait for a provider that does not answer."""
    monkeypatch.setattr(identity_provider, "RETRY_S", (0, 0))
    provider = Provider(_settings(documents.issuer), "development")
    for _ in range(3):
        assert provider.logout_origin() is None
    assert documents.asked == 0
    documents.agree(end_session_endpoint=f"{documents.issuer}/logout")
    assert provider.metadata() is not None and documents.asked == 1
    assert provider.logout_origin() == documents.issuer and documents.asked == 1
