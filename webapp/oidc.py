"""Single sign-on with an OpenID Connect provider (Authlib's Flask client).

``/login/sso`` sends the browser to the provider (authorization code flow, PKCE S256, ``state``,
``nonce``); ``/login/sso/callback`` takes the code back with the state this browser's session
holds, exchanges it once, validates the ID token (signature, issuer, audience, expiry within
``LEEWAY_S``, nonce) and signs the person on as a dashboard user (``Accounts.sign_on``: created on
first sign-on, never a local account taken over) with the highest role their groups grant.

``check_session`` reads a session's groups again once they are ``HAI_OIDC_REFRESH_S`` old: a
person removed from their groups loses the session on that request. Logout ends the session here,
then at the provider (``end_session_url``). ``discover`` checks the provider's discovery document
at start-up. The rules and their reasons: docs/sign-on.md.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any
from urllib.parse import urlsplit

import requests
from authlib.integrations.base_client import OAuthError
from authlib.integrations.flask_client import OAuth
from flask import Blueprint, Flask, current_app, g, redirect, request, session, url_for
from flask.typing import ResponseReturnValue
from joserfc.errors import JoseError

from scheduler_core.errors import ConfigError
from scheduler_core.oidc_settings import OidcSettings, SignOn
from scheduler_core.runtime.accounts import AuditTrail, NameTakenError, SessionUser
from scheduler_core.validation import shown
from webapp.signin import safe_next, sign_on_of, start_signed_in

logger = logging.getLogger(__name__)
bp = Blueprint("oidc", __name__)
LEEWAY_S = 60  # clock skew allowed between the provider and this host on an ID token's times
TIMEOUT_S = 10  # each request to the provider (discovery, keys, token, userinfo)
UNREACHABLE_GRACE_S = 300  # how long a session keeps its role when the provider does not answer
MAX_DISCOVERY = 256 * 1024  # bytes of a discovery document read
SESSION_KEY = "sso"  # in the Flask session: {"sub", "at" (access token), "seen" (groups read at)}
HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?")
REQUIRED_ENDPOINTS = ("authorization_endpoint", "token_endpoint", "jwks_uri", "userinfo_endpoint")


def discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def discover(settings: OidcSettings, environment: str) -> dict[str, Any]:
    """The provider's discovery document, checked against the settings; ``ConfigError`` naming
    the setting it contradicts (an issuer without discovery names ``HAI_OIDC_ISSUER``)."""
    url = discovery_url(settings.issuer)
    try:
        with requests.get(url, timeout=TIMEOUT_S, stream=True, allow_redirects=False) as response:
            body = response.raw.read(MAX_DISCOVERY + 1, decode_content=True)
            status = response.status_code
    except requests.RequestException as exc:
        raise ConfigError("HAI_OIDC_ISSUER", f"no discovery document at {url}: {_unanswered(exc)}") from None
    if status != 200 or len(body) > MAX_DISCOVERY:
        raise ConfigError("HAI_OIDC_ISSUER", f"no discovery document at {url}: HTTP {status}"
                          if status != 200 else f"the discovery document at {url} is over {MAX_DISCOVERY} bytes")
    try:
        metadata = json.loads(body)
    except ValueError:
        metadata = None
    if not isinstance(metadata, dict):
        raise ConfigError("HAI_OIDC_ISSUER", f"the discovery document at {url} is not a JSON object")
    _check_metadata(metadata, settings, environment)
    return metadata


def _unanswered(exc: requests.RequestException) -> str:
    if isinstance(exc, requests.Timeout):
        return f"no answer within {TIMEOUT_S} s"
    if isinstance(exc, requests.exceptions.SSLError):
        return "its TLS certificate was refused"
    if isinstance(exc, requests.ConnectionError):
        return "cannot connect (is the provider running, and the address right?)"
    return type(exc).__name__


def _check_metadata(metadata: dict[str, Any], settings: OidcSettings, environment: str) -> None:
    if metadata.get("issuer") != settings.issuer:
        raise ConfigError("HAI_OIDC_ISSUER", f"the provider names its issuer {shown(metadata.get('issuer'))}, "
                                             f"not {shown(settings.issuer)} (they must be the same, character "
                                             "for character)")
    for name in REQUIRED_ENDPOINTS:
        endpoint = metadata.get(name)
        scheme = urlsplit(endpoint).scheme if isinstance(endpoint, str) else None
        if scheme not in ("https", "http") or (scheme == "http" and environment != "development"):
            raise ConfigError("HAI_OIDC_ISSUER", f"the provider's discovery has no https {name} "
                                                 f"(got {shown(endpoint)})")
    methods = metadata.get("code_challenge_methods_supported")
    if isinstance(methods, list) and "S256" not in methods:
        raise ConfigError("HAI_OIDC_ISSUER", "the provider does not support PKCE with S256")
    claims = metadata.get("claims_supported")
    if isinstance(claims, list):
        for field, claim in (("HAI_OIDC_GROUPS_CLAIM", settings.groups_claim),
                             ("HAI_OIDC_USERNAME_CLAIM", settings.username_claim)):
            if claim not in claims:
                raise ConfigError(field, f"the provider supports no claim {shown(claim)} "
                                         f"(it names: {', '.join(str(c) for c in claims[:40])})")
    scopes = metadata.get("scopes_supported")
    if isinstance(scopes, list):
        unknown = [s for s in settings.scopes if s not in scopes]
        if unknown:
            raise ConfigError("HAI_OIDC_SCOPES", f"the provider supports no scope {shown(unknown[0])}")


def install(app: Flask, sign_on: SignOn, environment: str) -> None:
    """Register the provider (its discovery checked now) and the sign-on routes."""
    app.extensions["hai_sign_on"] = sign_on
    if sign_on.oidc is None:
        return
    settings = sign_on.oidc
    metadata = discover(settings, environment)
    oauth = OAuth(app)
    oauth.register("provider", client_id=settings.client_id, client_secret=settings.client_secret,
                   server_metadata_url=discovery_url(settings.issuer),
                   client_kwargs={"scope": " ".join(settings.scopes), "code_challenge_method": "S256",
                                  "default_timeout": TIMEOUT_S})
    oauth.provider.server_metadata.update(metadata, _loaded_at=time.time())
    app.extensions["hai_oidc"] = oauth.provider
    app.register_blueprint(bp)


def _provider() -> Any:
    return current_app.extensions["hai_oidc"]


def _settings() -> OidcSettings:
    settings = sign_on_of().oidc
    assert settings is not None  # the routes are registered only with sign-on
    return settings


def _callback_url() -> str:
    public = current_app.config.get("PUBLIC_URL")
    if public:
        return str(public).rstrip("/") + url_for("oidc.callback")
    return url_for("oidc.callback", _external=True)


@bp.get("/login/sso")
def start() -> ResponseReturnValue:
    next_url = safe_next(request.args.get("next"))
    session.pop("sso_next", None)
    if next_url:
        session["sso_next"] = next_url
    # "Sign in as someone else" after a refusal: the provider asks who you are, though its session lives
    extra = {"prompt": "login"} if request.args.get("again") == "1" else {}
    return _provider().authorize_redirect(_callback_url(), **extra)  # type: ignore[no-any-return]


@bp.get("/login/sso/callback")
def callback() -> ResponseReturnValue:
    next_url = session.pop("sso_next", None)
    try:
        token = _provider().authorize_access_token(leeway=LEEWAY_S, claims_options=_claims_options())
    except (OAuthError, JoseError, requests.RequestException, ValueError) as exc:
        return _refused(next_url, f"Single sign-on failed: {_reason(exc)}.", exc)
    claims = token.get("userinfo")
    if not isinstance(claims, dict) or not isinstance(claims.get("sub"), str):
        return _refused(next_url, "Single sign-on failed: the provider sent no ID token.")
    settings = _settings()
    groups = claims.get(settings.groups_claim)
    if groups is None:  # some providers put groups only in userinfo: the same person's, or none
        try:
            info = _userinfo(token.get("access_token"))
        except (requests.RequestException, ValueError) as exc:
            return _refused(next_url, "Single sign-on failed: the provider's userinfo did not answer.", exc)
        groups = info.get(settings.groups_claim) if info.get("sub") == claims["sub"] else None
    role = settings.role_of(groups)
    if role is None:
        return _refused(next_url, "Your groups at the identity provider grant no role in this dashboard.",
                        switch=True)
    try:
        user, before = current_app.extensions["hai_accounts"].sign_on(settings.issuer, claims["sub"],
                                                                      claims.get(settings.username_claim), role)
    except NameTakenError as exc:
        return _refused(next_url, f"Single sign-on failed: {exc.message}.", switch=True)
    except ConfigError:
        return _refused(next_url, f"Single sign-on failed: the provider's {settings.username_claim} claim is "
                                  "not a user name here (letters, digits and . - _ @, up to 64).", switch=True)
    if user.disabled:
        return _refused(next_url, "This user is disabled in the dashboard.", switch=True)
    _audit_role(user.name, before.role if before is not None else None, role)
    start_signed_in(user.name)
    session[SESSION_KEY] = {"sub": claims["sub"], "at": token.get("access_token"), "seen": time.time(),
                            "answered": time.time()}
    return redirect(next_url or url_for("overview.index"))


def _refused(next_url: str | None, message: str, cause: Exception | None = None,
             switch: bool = False) -> ResponseReturnValue:
    """Back to the sign-in page with ``message`` (once): the callback's address, with its code, does
    not stay in the address bar, and a reload asks nothing again. ``switch``: the person was
    recognised and refused, so the page offers to sign in as someone else."""
    logger.info("single sign-on refused: %s%s", message, f" ({type(cause).__name__}: {cause})" if cause else "")
    session["sso_refused"] = {"message": message, "switch": switch}
    return redirect(url_for("auth.login", next=next_url) if next_url else url_for("auth.login"))


def _audit_role(name: str, before: str | None, role: str) -> None:
    """A user created by signing on, or whose role their groups changed, in the audit trail."""
    if before == role:
        return
    AuditTrail(current_app.extensions["hai_engine"]).record(
        name, "user.create" if before is None else "user.role", name,
        before=None if before is None else {"role": before}, after={"role": role},
        reason="signed on: the role their groups at the identity provider grant")


def _claims_options() -> dict[str, Any]:
    settings = _settings()
    return {"iss": {"essential": True, "values": [settings.issuer]},
            "aud": {"essential": True, "values": [settings.client_id]},
            "sub": {"essential": True}, "exp": {"essential": True}, "iat": {"essential": True}}


def _reason(exc: Exception) -> str:
    """A short cause for the sign-in page: never a token, never the provider's whole answer."""
    if isinstance(exc, OAuthError):
        return {"mismatching_state": "the sign-in was not started by this browser (state mismatch)",
                "invalid_grant": "the provider refused the code (used already, or expired)",
                "invalid_client": "the provider refused the dashboard's client id or secret (invalid_client): "
                                  "check HAI_OIDC_CLIENT_ID and the client secret",
                "access_denied": "it was cancelled or refused at the provider (access_denied)"}.get(
            str(exc.error), f"the provider answered {str(exc.error)[:64]}")
    if isinstance(exc, requests.RequestException):
        return "the identity provider did not answer"
    text = type(exc).__name__
    known = {"BadSignatureError": "the ID token's signature is not the provider's",
             "ExpiredTokenError": "the ID token has expired",
             "InvalidClaimError": f"the ID token's claim is wrong ({str(exc)[:200]})",
             "MissingClaimError": f"the ID token lacks a claim ({str(exc)[:200]})"}
    return known.get(text, f"the ID token is not valid ({text})")


def _userinfo(access_token: Any) -> dict[str, Any]:
    """The userinfo endpoint's claims for ``access_token``; ``requests.HTTPError`` when the provider
    refuses the token, ``requests.RequestException`` when it does not answer."""
    endpoint = _provider().load_server_metadata()["userinfo_endpoint"]
    response = requests.get(endpoint, headers={"Authorization": f"Bearer {access_token}"}, timeout=TIMEOUT_S)
    response.raise_for_status()
    claims = response.json()
    return claims if isinstance(claims, dict) else {}


def check_session(found: SessionUser) -> SessionUser | None:
    """The session's user, its role read again from its groups when they are ``refresh_s`` old;
    None when the session must end (groups grant nothing now, the provider refused the token or
    does not answer for too long, the subject changed)."""
    sign_on = sign_on_of()
    if not found.signs_on:
        return found if sign_on.local else None  # local accounts turned off: their sessions end too
    state = session.get(SESSION_KEY)
    if sign_on.oidc is None or not isinstance(state, dict):
        return None
    now = time.time()
    if now - float(state.get("seen", 0)) < sign_on.oidc.refresh_s:
        return found
    try:
        claims = _userinfo(state.get("at"))
    except requests.HTTPError:
        return None
    except (requests.RequestException, ValueError):
        if now - float(state.get("answered", 0)) > UNREACHABLE_GRACE_S:
            return None
        logger.warning("the identity provider did not answer; %s keeps the role last read", found.name)
        return found
    role = sign_on.oidc.role_of(claims.get(sign_on.oidc.groups_claim))
    if role is None or claims.get("sub") != state.get("sub"):
        return None
    if role != found.role:
        user, _ = current_app.extensions["hai_accounts"].sign_on(sign_on.oidc.issuer, state["sub"], found.name, role)
        _audit_role(found.name, found.role, role)
        found = SessionUser(user.name, user.role, True)
    session[SESSION_KEY] = {**state, "seen": now, "answered": now}
    return found


def end_session_url() -> str | None:
    """Where logout sends the browser: the provider's end-session endpoint, coming back to the
    sign-in page; None without sign-on or when the provider has none."""
    if sign_on_of().oidc is None or "hai_oidc" not in current_app.extensions:
        return None
    provider = _provider()
    if not provider.load_server_metadata().get("end_session_endpoint"):
        return None
    public = current_app.config.get("PUBLIC_URL")
    back = str(public).rstrip("/") + url_for("auth.login") if public else url_for("auth.login", _external=True)
    url: str = provider.create_logout_url(post_logout_redirect_uri=back, client_id=_settings().client_id)["url"]
    return url


def logout_origin(app: Flask) -> str | None:
    """The origin of the provider's end-session endpoint: a form (logout) may lead there (CSP form-action)."""
    provider = app.extensions.get("hai_oidc")
    endpoint = provider.server_metadata.get("end_session_endpoint") if provider is not None else None
    if not isinstance(endpoint, str):
        return None
    parts = urlsplit(endpoint)
    if parts.scheme not in ("https", "http") or not HOST_PORT.fullmatch(parts.netloc):
        return None  # nothing that could write another directive into the header
    return f"{parts.scheme}://{parts.netloc}"


def signed_on() -> bool:
    return g.get("user") is not None and isinstance(session.get(SESSION_KEY), dict)
