"""The OpenID provider test harness itself (tests/helpers/oidc_provider.py, a real ``oidc-provider``).

A tiny relying party written here with ``requests`` only (the product's OpenID Connect login is not
involved) checks what the dashboard's login tests will lean on: discovery, the authorization code flow with
PKCE, state and nonce, the claims (``groups`` in the ID token), a replayed code and a missing verifier
refused by the provider (and said so in its token log), every ID-token mischief (on the next token only),
users changed at runtime, the login page refusing an unknown user, RP-initiated logout, and the same pages
in Chromium. ``authlib`` and ``cryptography`` are not installed: the RS256 signatures are checked here with
plain integer arithmetic (RSASSA-PKCS1-v1_5, SHA-256) against the provider's JWKS.

One provider (and one recording HTTP server standing in for the relying party's callback) per module.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests

from tests.helpers.http_server import RecordingServer
from tests.helpers.oidc_provider import (
    MISCHIEF_KINDS,
    MischiefKind,
    OidcClient,
    OidcLoginError,
    OidcProvider,
    OidcUser,
    authorize_until_callback,
    end_session_until_redirect,
    login_with_requests,
    require_oidc_provider,
)

pytestmark = pytest.mark.slow

CLIENT_ID = "harness-rp"
CLIENT_SECRET = "harness-rp-secret"
OTHER_CLIENT_ID = "other-rp"
SCOPE = "openid profile email groups"
ID_TOKEN_TTL = 600
CHROMIUM = os.environ.get("HAI_TEST_CHROMIUM", "/usr/bin/chromium")


@dataclass
class Harness:
    op: OidcProvider
    rp: RecordingServer  # answers the callback and the post-logout redirect (200), recording them
    redirect_uri: str
    post_logout_redirect_uri: str
    discovery: dict[str, Any]
    jwks: dict[str, Any]


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    require_oidc_provider()
    with RecordingServer() as rp:
        redirect_uri, post_logout = rp.url("ok/callback"), rp.url("ok/signed-out")
        clients: list[OidcClient] = [
            {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "redirect_uris": [redirect_uri],
             "post_logout_redirect_uris": [post_logout]},
            {"client_id": OTHER_CLIENT_ID, "client_secret": "other-secret", "redirect_uris": [rp.url("ok/other")],
             "token_endpoint_auth_method": "client_secret_post"},
        ]
        users: dict[str, OidcUser] = {
            "alice": {"groups": ["payments-ops"], "email": "alice@example.test", "name": "Alice"},
            "bob": {"groups": ["payments-ops", "auditors"]},
        }
        with OidcProvider.start(clients=clients, users=users, id_token_ttl=ID_TOKEN_TTL) as op:
            discovery = requests.get(op.discovery_url, timeout=10).json()
            jwks = requests.get(discovery["jwks_uri"], timeout=10).json()
            yield Harness(op, rp, redirect_uri, post_logout, discovery, jwks)


@pytest.fixture(autouse=True)
def _disarmed(request: pytest.FixtureRequest) -> Iterator[None]:
    """No mischief left armed by a failed test for the next one on the module's provider."""
    yield
    if "harness" in request.fixturenames:
        request.getfixturevalue("harness").op.mischief(None)


# ------------------------------------------------------------------------------------------ a tiny RP


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class AuthRequest:
    url: str
    state: str
    nonce: str
    verifier: str


def authorization_request(h: Harness, *, pkce: bool = True) -> AuthRequest:
    state, nonce, verifier = secrets.token_urlsafe(16), secrets.token_urlsafe(16), secrets.token_urlsafe(48)
    params = {"response_type": "code", "client_id": CLIENT_ID, "redirect_uri": h.redirect_uri, "scope": SCOPE,
              "state": state, "nonce": nonce}
    if pkce:
        params |= {"code_challenge": _b64url(hashlib.sha256(verifier.encode()).digest()),
                   "code_challenge_method": "S256"}
    return AuthRequest(f"{h.discovery['authorization_endpoint']}?{urlencode(params)}", state, nonce, verifier)


def callback_params(h: Harness, callback: str) -> dict[str, str]:
    assert callback.startswith(h.redirect_uri + "?"), callback
    return {name: values[0] for name, values in parse_qs(urlsplit(callback).query).items()}


def redeem(h: Harness, code: str, verifier: str | None, *, auth: str = "client_secret_basic") -> requests.Response:
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": h.redirect_uri}
    if verifier is not None:
        data["code_verifier"] = verifier
    if auth == "client_secret_basic":
        return requests.post(h.discovery["token_endpoint"], data=data, auth=(CLIENT_ID, CLIENT_SECRET), timeout=10)
    data |= {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}
    return requests.post(h.discovery["token_endpoint"], data=data, timeout=10)


def sign_in(h: Harness, username: str, http: requests.Session | None = None,
            auth: str = "client_secret_basic") -> tuple[AuthRequest, dict[str, Any]]:
    """A whole code flow; returns the request and the token response (checked: 200, state, iss)."""
    request = authorization_request(h)
    params = callback_params(h, authorize_until_callback(http or requests.Session(), request.url, username))
    assert params["state"] == request.state
    assert params["iss"] == h.op.issuer  # RFC 9207 authorization response issuer
    response = redeem(h, params["code"], request.verifier, auth=auth)
    assert response.status_code == 200, response.text
    return request, response.json()


def jwt_parts(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    header, payload, _ = token.split(".")
    return json.loads(_unb64url(header)), json.loads(_unb64url(payload))


_SHA256_DIGEST_INFO = bytes.fromhex("3031300d060960864801650304020105000420")


def rs256_valid(token: str, jwks: dict[str, Any]) -> bool:
    """RSASSA-PKCS1-v1_5 with SHA-256 (RFC 8017 8.2.2) against the JWKS key named by the header's kid."""
    header, _ = jwt_parts(token)
    assert header["alg"] == "RS256"
    key = next(k for k in jwks["keys"] if k["kid"] == header["kid"])
    n, e = int.from_bytes(_unb64url(key["n"]), "big"), int.from_bytes(_unb64url(key["e"]), "big")
    signing_input, _, signature = token.rpartition(".")
    size = (n.bit_length() + 7) // 8
    digest_info = _SHA256_DIGEST_INFO + hashlib.sha256(signing_input.encode()).digest()
    expected = b"\x00\x01" + b"\xff" * (size - len(digest_info) - 3) + b"\x00" + digest_info
    recovered = pow(int.from_bytes(_unb64url(signature), "big"), e, n).to_bytes(size, "big")
    return secrets.compare_digest(recovered, expected)


# ------------------------------------------------------------------------------------------ tests


def test_discovery_names_the_issuer_and_the_endpoints(harness: Harness) -> None:
    d, issuer = harness.discovery, harness.op.issuer
    assert issuer.startswith("http://127.0.0.1:")
    assert d["issuer"] == issuer
    for name, path in [("authorization_endpoint", "/auth"), ("token_endpoint", "/token"), ("jwks_uri", "/jwks"),
                       ("userinfo_endpoint", "/me"), ("end_session_endpoint", "/session/end")]:
        assert d[name] == issuer + path
    assert d["response_types_supported"] == ["code"]
    assert d["code_challenge_methods_supported"] == ["S256"]
    assert {"openid", "profile", "email", "groups"} <= set(d["scopes_supported"])
    assert {"sub", "preferred_username", "email", "name", "groups"} <= set(d["claims_supported"])
    assert {"client_secret_basic", "client_secret_post"} <= set(d["token_endpoint_auth_methods_supported"])
    assert d["id_token_signing_alg_values_supported"] == ["RS256"]
    [key] = harness.jwks["keys"]
    assert (key["kty"], key["alg"], key["use"]) == ("RSA", "RS256", "sig")
    assert "d" not in key  # the public half only


@pytest.mark.parametrize("auth", ["client_secret_basic", "client_secret_post"])
def test_code_flow_with_pkce_gives_a_signed_id_token_with_groups(harness: Harness, auth: str) -> None:
    request, tokens = sign_in(harness, "alice", auth=auth)
    id_token = tokens["id_token"]
    header, claims = jwt_parts(id_token)
    assert header["kid"] == harness.jwks["keys"][0]["kid"]
    assert rs256_valid(id_token, harness.jwks)
    assert claims["iss"] == harness.op.issuer
    assert claims["aud"] == CLIENT_ID
    assert claims["nonce"] == request.nonce
    assert claims["sub"] == claims["preferred_username"] == "alice"
    assert (claims["email"], claims["name"], claims["groups"]) == ("alice@example.test", "Alice", ["payments-ops"])
    assert claims["exp"] - claims["iat"] == ID_TOKEN_TTL
    assert abs(claims["iat"] - time.time()) < 60
    me = requests.get(harness.discovery["userinfo_endpoint"], timeout=10,
                      headers={"Authorization": f"Bearer {tokens['access_token']}"})
    assert me.status_code == 200, me.text
    assert me.json()["groups"] == ["payments-ops"]
    entry = harness.op.token_log()[-1]
    assert entry["grant_type"] == "authorization_code"
    assert entry["client_id"] == CLIENT_ID
    assert entry["code_verifier_sent"] is True
    assert entry["outcome"] == "success"


def test_login_with_requests_requests_the_callback(harness: Harness) -> None:
    request = authorization_request(harness)
    answer = login_with_requests(requests.Session(), request.url, "alice")
    assert answer.status_code == 200  # the recording server's answer at the callback
    assert answer.url.startswith(harness.redirect_uri + "?")
    received = harness.rp.requests[-1]
    assert received.path.startswith("/ok/callback?") and f"state={request.state}" in received.path


def test_a_live_provider_session_skips_the_login_form(harness: Harness) -> None:
    http = requests.Session()
    sign_in(harness, "alice", http)
    request = authorization_request(harness)
    first = http.get(request.url, allow_redirects=False, timeout=10)
    assert first.is_redirect  # no page: straight on (to the automatic consent, then the callback)
    _, tokens = sign_in(harness, "nobody-asked", http)  # the form is not shown: the username is not used
    assert jwt_parts(tokens["id_token"])[1]["sub"] == "alice"


def test_a_replayed_code_is_refused_and_logged(harness: Harness) -> None:
    request = authorization_request(harness)
    code = callback_params(harness, authorize_until_callback(requests.Session(), request.url, "alice"))["code"]
    assert redeem(harness, code, request.verifier).status_code == 200
    again = redeem(harness, code, request.verifier)
    assert again.status_code == 400
    assert again.json()["error"] == "invalid_grant"
    first, second = harness.op.token_log()[-2:]
    assert first["outcome"] == "success"
    assert second["outcome"] == "invalid_grant"
    assert second["error_detail"] == "authorization code already consumed"


def test_pkce_is_required(harness: Harness) -> None:
    # no code_challenge in the authorization request: refused, back at the callback with an error
    request = authorization_request(harness, pkce=False)
    params = callback_params(harness, authorize_until_callback(requests.Session(), request.url, "alice"))
    assert params["error"] == "invalid_request"
    assert "requires PKCE" in params["error_description"]
    assert "code" not in params
    # a challenge sent, but no verifier with the code: refused at the token endpoint
    request = authorization_request(harness)
    code = callback_params(harness, authorize_until_callback(requests.Session(), request.url, "alice"))["code"]
    refused = redeem(harness, code, None)
    assert (refused.status_code, refused.json()["error"]) == (400, "invalid_grant")
    entry = harness.op.token_log()[-1]
    assert entry["code_verifier_sent"] is False
    assert (entry["outcome"], entry["error_detail"]) == ("invalid_grant", "code_verifier must be provided")
    # a wrong verifier too; neither refusal spends the code (oidc-provider checks PKCE before consuming it)
    assert redeem(harness, code, secrets.token_urlsafe(48)).json()["error"] == "invalid_grant"
    assert harness.op.token_log()[-1]["code_verifier_sent"] is True
    assert redeem(harness, code, request.verifier).status_code == 200


@pytest.mark.parametrize("kind", MISCHIEF_KINDS)
def test_mischief_changes_the_next_id_token_only(harness: Harness, kind: MischiefKind) -> None:
    harness.op.mischief(kind)
    request, tokens = sign_in(harness, "alice")
    header, claims = jwt_parts(tokens["id_token"])
    assert header["kid"] == harness.jwks["keys"][0]["kid"]
    assert rs256_valid(tokens["id_token"], harness.jwks) is (kind != "forged")
    now = time.time()
    assert (claims["aud"] == CLIENT_ID) is (kind != "wrong_audience")
    assert (claims["iss"] == harness.op.issuer) is (kind != "wrong_issuer")
    assert (claims["nonce"] == request.nonce) is (kind != "wrong_nonce")
    assert (claims["exp"] < now - 3600 + 60 and claims["iat"] < now - 3600) is (kind == "expired")
    if kind == "wrong_audience":
        assert claims["aud"] == OTHER_CLIENT_ID
    assert claims["groups"] == ["payments-ops"]
    assert harness.op.token_log()[-1]["mischief"] == kind

    request, tokens = sign_in(harness, "alice")  # one-shot: the next one is genuine
    _, claims = jwt_parts(tokens["id_token"])
    assert rs256_valid(tokens["id_token"], harness.jwks)
    assert (claims["aud"], claims["iss"], claims["nonce"]) == (CLIENT_ID, harness.op.issuer, request.nonce)
    assert claims["exp"] > time.time()
    assert harness.op.token_log()[-1]["mischief"] is None


def test_mischief_waits_for_a_successful_token_response_and_can_be_disarmed(harness: Harness) -> None:
    harness.op.mischief("wrong_nonce")
    request = authorization_request(harness)
    code = callback_params(harness, authorize_until_callback(requests.Session(), request.url, "alice"))["code"]
    assert redeem(harness, code, None).status_code == 400  # a refusal does not use it up
    assert harness.op.token_log()[-1]["mischief"] is None
    tokens = redeem(harness, code, request.verifier).json()
    assert jwt_parts(tokens["id_token"])[1]["nonce"] != request.nonce
    harness.op.mischief("forged")
    harness.op.mischief(None)
    _, tokens = sign_in(harness, "alice")
    assert rs256_valid(tokens["id_token"], harness.jwks)
    with pytest.raises(ValueError, match="unknown mischief"):
        harness.op.mischief("nonsense")  # type: ignore[arg-type]


def test_set_user_changes_the_groups_of_the_next_login(harness: Harness) -> None:
    harness.op.set_user("carol", groups=["payments-ops", "auditors"], email="carol@example.test", name="Carol")
    _, tokens = sign_in(harness, "carol")
    claims = jwt_parts(tokens["id_token"])[1]
    assert (claims["groups"], claims["email"], claims["name"]) == (["payments-ops", "auditors"],
                                                                   "carol@example.test", "Carol")
    http = requests.Session()
    sign_in(harness, "carol", http)

    harness.op.set_user("carol", groups=["auditors"], email="carol@example.test", name="Carol")
    _, tokens = sign_in(harness, "carol")  # a fresh login
    assert jwt_parts(tokens["id_token"])[1]["groups"] == ["auditors"]
    _, tokens = sign_in(harness, "carol", http)  # and a silent one on the provider session from before
    assert jwt_parts(tokens["id_token"])[1]["groups"] == ["auditors"]

    harness.op.remove_user("carol")
    with pytest.raises(OidcLoginError, match="refused the login"):
        sign_in(harness, "carol")
    # a provider session of the removed user asks for a login again (and another user may sign in)
    request = authorization_request(harness)
    assert 'name="username"' in http.get(request.url, timeout=10).text
    _, tokens = sign_in(harness, "bob", http)
    assert jwt_parts(tokens["id_token"])[1]["groups"] == ["payments-ops", "auditors"]


def test_an_unknown_user_gets_the_login_form_again_with_an_error(harness: Harness) -> None:
    request = authorization_request(harness)
    with pytest.raises(OidcLoginError) as refused:
        authorize_until_callback(requests.Session(), request.url, "mallory")
    page = refused.value.response
    assert page.status_code == 200
    assert 'id="error"' in page.text and "Unknown user" in page.text and "mallory" in page.text
    assert '<form method="post"' in page.text and 'name="username"' in page.text and "Sign in</button>" in page.text
    # the same interaction accepts a known user afterwards
    http = requests.Session()
    form_page = http.get(request.url, timeout=10)
    assert 'name="username"' in form_page.text
    action = form_page.text.split('action="', 1)[1].split('"', 1)[0]
    assert "Unknown user" in http.post(form_page.url.split("/interaction/")[0] + action,
                                       data={"username": "nobody", "password": "x"}, timeout=10).text
    answer = http.post(form_page.url.split("/interaction/")[0] + action, data={"username": "alice", "password": "x"},
                       allow_redirects=True, timeout=10)
    assert answer.url.startswith(harness.redirect_uri + "?code=")


def test_rp_initiated_logout(harness: Harness) -> None:
    http = requests.Session()
    _, tokens = sign_in(harness, "alice", http)
    assert "op_session" in http.cookies
    logout = {"id_token_hint": tokens["id_token"], "post_logout_redirect_uri": harness.post_logout_redirect_uri,
              "state": "bye"}
    url = f"{harness.discovery['end_session_endpoint']}?{urlencode(logout)}"
    page = http.get(url, timeout=10)
    assert page.status_code == 200
    assert '<form id="op.logoutForm" method="post"' in page.text  # a plain form, auto-submitted by a script
    assert 'name="logout" value="yes"' in page.text and 'name="xsrf"' in page.text

    assert end_session_until_redirect(http, url) == f"{harness.post_logout_redirect_uri}?state=bye"
    assert "op_session" not in http.cookies
    again = http.get(authorization_request(harness).url, timeout=10)  # signed out: the login form again
    assert 'name="username"' in again.text

    # an unregistered post_logout_redirect_uri is refused
    _, tokens = sign_in(harness, "alice", http)
    bad = http.get(harness.discovery["end_session_endpoint"], timeout=10,
                   params={"id_token_hint": tokens["id_token"], "post_logout_redirect_uri": "http://evil.test/"})
    assert bad.status_code == 400 and "post_logout_redirect_uri not registered" in bad.text


def test_the_admin_api_wants_the_token(harness: Harness) -> None:
    for method, path in [("GET", "/test-admin/log"), ("POST", "/test-admin/mischief"),
                         ("PUT", "/test-admin/users/eve"), ("DELETE", "/test-admin/users/alice")]:
        for headers in [{}, {"Authorization": "Bearer wrong"}]:
            answer = requests.request(method, harness.op.issuer + path, headers=headers, json={}, timeout=10)
            assert answer.status_code == 401, (method, path)
    assert harness.op.admin_token not in harness.op.stderr_text()


def test_require_oidc_provider_skips_or_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no node, no npm
    monkeypatch.setenv("HAI_TEST_REQUIRE", "browser")
    with pytest.raises(pytest.skip.Exception, match="needs Node"):
        require_oidc_provider()
    monkeypatch.setenv("HAI_TEST_REQUIRE", "browser, oidc")
    with pytest.raises(pytest.fail.Exception, match="required by HAI_TEST_REQUIRE"):
        require_oidc_provider()


def test_chromium_signs_in_and_out_without_javascript_on_our_side(harness: Harness) -> None:
    problem = None
    if not Path(CHROMIUM).exists():
        problem = f"no Chromium at {CHROMIUM}"
    else:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            problem = "the playwright package is not installed"
    if problem:
        if "browser" in {n.strip() for n in os.environ.get("HAI_TEST_REQUIRE", "").split(",")}:
            pytest.fail(f"{problem} (required by HAI_TEST_REQUIRE)")
        pytest.skip(problem)

    request = authorization_request(harness)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_context().new_page()
            page.goto(request.url)
            page.fill('input[name="username"]', "mallory")
            page.fill('input[name="password"]', "whatever")
            page.get_by_role("button", name="Sign in").click()
            assert "Unknown user" in page.locator("#error").inner_text()
            page.fill('input[name="username"]', "alice")
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(harness.redirect_uri + "?*")
            params = callback_params(harness, page.url)
            assert params["state"] == request.state
            cookies = {c["name"]: c for c in page.context.cookies()}
            assert cookies["op_session"]["secure"] is False and cookies["op_session"]["httpOnly"] is True
            assert cookies["op_session"]["sameSite"] == "Lax"
            tokens = redeem(harness, params["code"], request.verifier).json()

            logout = {"id_token_hint": tokens["id_token"], "state": "bye",
                      "post_logout_redirect_uri": harness.post_logout_redirect_uri}
            page.goto(f"{harness.discovery['end_session_endpoint']}?{urlencode(logout)}")
            page.wait_for_url(f"{harness.post_logout_redirect_uri}?state=bye")  # no click: the form submits itself
            assert "op_session" not in {c["name"] for c in page.context.cookies()}
        finally:
            browser.close()
