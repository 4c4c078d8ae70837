"""Single sign-on with an OpenID Connect provider (Authlib's Flask client).

``/login/sso`` sends the browser to the provider (authorization code flow, PKCE S256, ``state``,
``nonce``); ``/login/sso/callback`` takes the code back with the state this browser's session
holds, exchanges it once, validates the ID token (asymmetric signature, issuer, audience, expiry
within ``LEEWAY_S``, nonce) and signs the person on as a dashboard user (``Accounts.sign_on``:
created on first sign-on, never a local account taken over) with the highest role their groups
grant. A refusal goes back to the sign-in page with its cause, once.

``check_session`` reads a session's groups again once they are ``HAI_OIDC_REFRESH_S`` old: groups
that grant nothing end every session and API token of the person. Logout ends the session here,
then at the provider (``end_session_url``). The provider itself: webapp/identity_provider.py.
The rules and their reasons: docs/sign-on.md.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import requests
from authlib.integrations.base_client import OAuthError
from authlib.integrations.flask_client import OAuth
from flask import Blueprint, Flask, current_app, redirect, request, session, url_for
from flask.typing import ResponseReturnValue
from joserfc.errors import JoseError

from scheduler_core.access import Access
from scheduler_core.errors import ConfigError
from scheduler_core.oidc_settings import OidcSettings, SignOn
from scheduler_core.runtime.accounts import AuditTrail, NameTakenError, SessionUser
from webapp.identity_provider import (
    MAX_USERINFO,
    TIMEOUT_S,
    Answer,
    BoundedSession,
    Provider,
    discovery_url,
    fetch_json,
)
from webapp.signin import logins, safe_next, sign_on_of, start_signed_in

logger = logging.getLogger(__name__)
bp = Blueprint("oidc", __name__)
LEEWAY_S = 60  # clock skew allowed between the provider and this host on an ID token's times
UNREACHABLE_GRACE_MS = 300_000  # how long a session keeps its role while the provider does not answer
UNREACHABLE_RETRY_MS = 30_000  # ... asked again at most this often meanwhile
KEPT_STARTS = 3  # sign-ins started in one browser and not finished, whose state the session keeps
OAUTH_ERRORS = {  # RFC 6749 4.1.2.1 and 5.2: what the provider may answer; anything else is shown generically
    "mismatching_state": "the sign-in was not started by this browser (state mismatch)",
    "invalid_grant": "the provider refused the code (used already, or expired)",
    "invalid_client": "the provider refused the dashboard's client id or secret (invalid_client): check "
                      "HAI_OIDC_CLIENT_ID and the client secret",
    "access_denied": "it was cancelled or refused at the provider (access_denied)",
    "invalid_request": "the provider found the request invalid (invalid_request)",
    "unauthorized_client": "the provider does not allow this client the code flow (unauthorized_client)",
    "unsupported_response_type": "the provider does not offer the code flow (unsupported_response_type)",
    "invalid_scope": "the provider refused a scope (invalid_scope): check HAI_OIDC_SCOPES",
    "server_error": "the provider failed (server_error)",
    "temporarily_unavailable": "the provider is temporarily unavailable",
    "login_required": "the provider needs you to sign in (login_required)",
}


def install(app: Flask, sign_on: SignOn, environment: str) -> None:
    """Register the provider and the sign-on routes. The discovery document is read now if the
    provider answers, else later (identity_provider.Provider): a worker never fails to boot for it."""
    app.extensions["hai_sign_on"] = sign_on
    if sign_on.oidc is None:
        return
    settings = sign_on.oidc
    provider = Provider(settings, environment)
    oauth = OAuth(app)
    client = oauth.register(
        "provider", client_id=settings.client_id, client_secret=settings.client_secret,
        server_metadata_url=discovery_url(settings.issuer),
        client_kwargs={"scope": " ".join(settings.scopes), "code_challenge_method": "S256",
                       "default_timeout": TIMEOUT_S})
    client.client_cls = BoundedSession  # the token endpoint's and the JWKS answers: bounded like the rest
    app.extensions["hai_oidc"] = (provider, client)
    provider.metadata()  # now, when it answers
    app.register_blueprint(bp)


def _client() -> Any:
    """Authlib's client with the discovery document this worker has; None while it has none."""
    provider, client = current_app.extensions["hai_oidc"]
    metadata = provider.metadata()
    if metadata is None:
        return None
    if client.server_metadata.get("issuer") != metadata["issuer"]:
        client.server_metadata.update(metadata, _loaded_at=time.time())  # never fetched again by Authlib
    return client


def _provider() -> Provider:
    provider: Provider = current_app.extensions["hai_oidc"][0]
    return provider


def _settings() -> OidcSettings:
    settings = sign_on_of().oidc
    assert settings is not None  # the routes are registered only with sign-on
    return settings


def _public(endpoint: str, **values: Any) -> str:
    """An address of this dashboard the provider sends the browser back to: from HAI_PUBLIC_URL
    (required in production), else from the request."""
    public = current_app.config.get("PUBLIC_URL")
    if public:
        return str(public).rstrip("/") + url_for(endpoint, **values)
    return url_for(endpoint, _external=True, **values)


@bp.get("/login/sso")
def start() -> ResponseReturnValue:
    next_url = safe_next(request.args.get("next"))
    client = _client()
    if client is None:
        return _refused(next_url, f"Single sign-on is unavailable: {_provider().problem}. Local accounts still "
                                  "sign in.")
    session.pop("sso_next", None)
    if next_url:
        session["sso_next"] = next_url
    _forget_old_starts()
    # "Sign in as someone else" after a refusal: the provider asks who you are, though its session lives
    extra = {"prompt": "login"} if request.args.get("again") == "1" else {}
    return client.authorize_redirect(_public("oidc.callback"), **extra)  # type: ignore[no-any-return]


def _forget_old_starts() -> None:
    """Authlib keeps each started sign-in's state in the session until its callback: keep the
    newest few, so abandoned starts cannot grow the cookie past what a browser keeps."""
    started = sorted((k for k in session if k.startswith("_state_provider_")),
                     key=lambda k: session[k].get("exp", 0) if isinstance(session[k], dict) else 0)
    for key in started[:max(0, len(started) - (KEPT_STARTS - 1))]:
        session.pop(key, None)


@bp.get("/login/sso/callback")
def callback() -> ResponseReturnValue:
    next_url = session.pop("sso_next", None)
    client = _client()
    if client is None:
        return _refused(next_url, f"Single sign-on is unavailable: {_provider().problem}.")
    try:
        token = client.authorize_access_token(leeway=LEEWAY_S, claims_options=_claims_options())
    except (OAuthError, JoseError, requests.RequestException, ValueError, KeyError, TypeError) as exc:
        return _refused(next_url, f"Single sign-on failed: {_reason(exc)}.", exc)
    claims = token.get("userinfo")
    if not isinstance(claims, dict) or not isinstance(claims.get("sub"), str):
        return _refused(next_url, "Single sign-on failed: the provider sent no ID token.")
    settings = _settings()
    groups = claims.get(settings.groups_claim)
    if groups is None:  # some providers put groups only in userinfo: the same person's, or none
        answer = _userinfo(token.get("access_token"))
        if answer is None or answer.status != 200:
            return _refused(next_url, "Single sign-on failed: the provider's userinfo did not answer.")
        info = answer.body if isinstance(answer.body, dict) else {}
        groups = info.get(settings.groups_claim) if info.get("sub") == claims["sub"] else None
    access = settings.access_of(groups)
    if access.nothing:
        return _refused(next_url, "Your groups at the identity provider grant no role in this dashboard.",
                        switch=True)
    try:
        signed = current_app.extensions["hai_accounts"].sign_on(settings.issuer, claims["sub"],
                                                                claims.get(settings.username_claim), access)
    except NameTakenError as exc:
        return _refused(next_url, f"Single sign-on failed: {exc.message}.", switch=True)
    except ConfigError as exc:
        if exc.field == "grants":  # HAI_OIDC_GROUP_ROLES names a team this dashboard does not have
            return _refused(next_url, "Single sign-on failed: your groups grant a role in a team this dashboard "
                                      f"does not have ({exc.message.removeprefix('grants: ')}); tell an "
                                      "administrator.", exc)
        return _refused(next_url, f"Single sign-on failed: the provider's {settings.username_claim} claim is "
                                  "not a user name here (letters, digits and . - _ @, up to 64).", switch=True)
    user = signed.user
    if user.disabled:
        return _refused(next_url, "This user is disabled in the dashboard.", switch=True)
    before = None if signed.before is None else Access.of(signed.before.role, signed.grants_before)
    _audit_access(user.name, before, access)
    now = _now_ms()
    start_signed_in(user.name, {"sub": claims["sub"], "at": str(token.get("access_token") or ""),
                                "seen": now, "answered": now, "retry": 0})
    return redirect(next_url or url_for("overview.index"))


def _refused(next_url: str | None, message: str, cause: Exception | None = None,
             switch: bool = False) -> ResponseReturnValue:
    """Back to the sign-in page with ``message`` (once): the callback's address, with its code, does
    not stay in the address bar, and a reload asks nothing again. ``switch``: the person was
    recognised and refused, so the page offers to sign in as someone else."""
    logger.info("single sign-on refused: %s%s", message,
                f" ({type(cause).__name__}: {str(cause)[:300]!r})" if cause else "")
    session["sso_refused"] = {"message": message, "switch": switch}
    return redirect(url_for("auth.login", next=next_url) if next_url else url_for("auth.login"))


def _roles(access: Access) -> dict[str, Any]:
    return {"role": access.global_role, "teams": dict(access.grants)}


def _audit_access(name: str, before: Access | None, access: Access) -> None:
    """A user created by signing on, or whose roles their groups changed, in the audit trail."""
    if before == access:
        return
    AuditTrail(current_app.extensions["hai_engine"]).record(
        name, "user.create" if before is None else "user.role", name,
        before=None if before is None else _roles(before), after=_roles(access),
        reason="signed on: the roles their groups at the identity provider grant")


def _claims_options() -> dict[str, Any]:
    settings = _settings()
    return {"iss": {"essential": True, "values": [settings.issuer]},
            "aud": {"essential": True, "values": [settings.client_id]},
            "sub": {"essential": True}, "exp": {"essential": True}, "iat": {"essential": True}}


def _reason(exc: Exception) -> str:
    """A short cause for the sign-in page: never a token, never the provider's own words."""
    if isinstance(exc, OAuthError):
        return OAUTH_ERRORS.get(str(exc.error), "the provider refused the sign-in")
    if isinstance(exc, requests.RequestException):
        return "the identity provider did not answer"
    text = type(exc).__name__
    known = {"BadSignatureError": "the ID token's signature is not the provider's",
             "ExpiredTokenError": "the ID token has expired",
             "InvalidClaimError": f"the ID token's claim is wrong ({str(exc)[:200]})",
             "MissingClaimError": f"the ID token lacks a claim ({str(exc)[:200]})"}
    return known.get(text, f"the provider's answer is not valid ({text})")


def _userinfo(access_token: Any) -> Answer | None:
    """The userinfo endpoint's answer for ``access_token`` (bounded); None when it does not answer."""
    metadata = _provider().metadata()
    if metadata is None:
        return None
    try:
        return fetch_json(metadata["userinfo_endpoint"], MAX_USERINFO, {"Authorization": f"Bearer {access_token}"})
    except requests.RequestException:
        return None


def _now_ms() -> int:
    return int(time.time() * 1000)


def check_session(found: SessionUser) -> SessionUser | None:
    """The session's user, its role read again from its groups once they are ``refresh_s`` old;
    None when the session must end: the provider refused the access token (401, 403), answered
    junk, another subject, or groups that grant nothing (then every session and API token of the
    user end too: ``Accounts.lose_access``), or did not answer for ``UNREACHABLE_GRACE_MS``."""
    sign_on = sign_on_of()
    if not found.signs_on:
        return found if sign_on.local else None  # local accounts turned off: their sessions end too
    state = found.sign_on
    if sign_on.oidc is None or not isinstance(state, dict):
        return None
    now = _now_ms()
    if now - int(state.get("seen", 0)) < sign_on.oidc.refresh_s * 1000 or now < int(state.get("retry", 0)):
        return found
    answer = _userinfo(state.get("at"))
    if answer is None or answer.status not in (200, 401, 403):  # no answer, 5xx, 429: the role last read holds
        if now - int(state.get("answered", 0)) > UNREACHABLE_GRACE_MS:
            return None
        logger.warning("the identity provider did not answer; %s keeps the role last read", found.name)
        logins().set_sign_on(session.get("sid"), {**state, "retry": now + UNREACHABLE_RETRY_MS})
        return found
    if answer.status != 200 or not isinstance(answer.body, dict) or answer.body.get("sub") != state.get("sub"):
        return None
    access = sign_on.oidc.access_of(answer.body.get(sign_on.oidc.groups_claim))
    accounts = current_app.extensions["hai_accounts"]
    held = Access.of(found.role, found.grants)
    if access.nothing:
        sessions, tokens = accounts.lose_access(found.name)
        AuditTrail(current_app.extensions["hai_engine"]).record(
            found.name, "user.access_lost", found.name, before=_roles(held),
            after={"sessions_ended": sessions, "tokens_revoked": tokens},
            reason="signed on: their groups at the identity provider grant no role now")
        return None
    if access != held:
        try:
            user = accounts.sign_on(sign_on.oidc.issuer, state["sub"], found.name, access).user
        except ConfigError as exc:  # a group maps to a team that is gone: no role can be worked out
            logger.warning("sign-on of %s: %s; the session ends", found.name, exc.message)
            return None
        _audit_access(found.name, held, access)
        found = SessionUser(user.name, user.role, True, state, dict(access.grants))
    logins().set_sign_on(session.get("sid"), {**state, "seen": now, "answered": now, "retry": 0})
    return found


def end_session_url() -> str | None:
    """Where logout sends the browser: the provider's end-session endpoint, coming back to the
    sign-in page; None without sign-on or when the provider has none (or is not known yet)."""
    if sign_on_of().oidc is None or "hai_oidc" not in current_app.extensions:
        return None
    client = _client()
    if client is None or not client.server_metadata.get("end_session_endpoint"):
        return None
    url: str = client.create_logout_url(post_logout_redirect_uri=_public("auth.login"),
                                        client_id=_settings().client_id)["url"]
    return url


def logout_origin() -> str | None:
    """The provider's end-session origin, for the CSP's form-action (None without sign-on)."""
    found = current_app.extensions.get("hai_oidc")
    return found[0].logout_origin() if found is not None else None
