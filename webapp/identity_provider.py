"""The identity provider as the dashboard knows it: its discovery document, and bounded reads of
what it answers (every answer is untrusted input: size and time are capped).

``discover`` is strict and runs once in ``serve`` before any worker starts: a provider that does
not answer or does not agree stops start-up with the setting it contradicts. A worker never fails
to boot because of the provider (a restart during an outage would take the scheduler down with
it): ``Provider`` asks again, backing off, and until it has an answer single sign-on says it is
unavailable while local accounts keep working. ID tokens are accepted only with an asymmetric
signature (``SIGNING_ALGORITHMS``), whatever the discovery document lists.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests

from scheduler_core.errors import ConfigError
from scheduler_core.oidc_settings import OidcSettings
from scheduler_core.validation import shown

logger = logging.getLogger(__name__)
TIMEOUT_S = 10  # the whole of one request to the provider (discovery, userinfo)
MAX_DISCOVERY = 256 * 1024  # bytes of a discovery document read
MAX_USERINFO = 64 * 1024  # bytes of a userinfo answer read
RETRY_S = (5, 300)  # a worker without the discovery document asks again: first after 5 s, doubling to 5 minutes
SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
REQUIRED_ENDPOINTS = ("authorization_endpoint", "token_endpoint", "jwks_uri", "userinfo_endpoint")
HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?")


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any  # the parsed JSON, or None (not JSON, or too large)


def fetch_json(url: str, limit: int, headers: dict[str, str] | None = None) -> Answer:
    """GET ``url`` (no redirects) within ``TIMEOUT_S`` in all and ``limit`` bytes; raises
    ``requests.RequestException`` when it does not answer in time."""
    deadline = time.monotonic() + TIMEOUT_S
    with requests.get(url, headers=headers, timeout=TIMEOUT_S, stream=True, allow_redirects=False) as response:
        chunks, size = [], 0
        for chunk in response.iter_content(8192):
            size += len(chunk)
            if size > limit:
                return Answer(response.status_code, None)
            chunks.append(chunk)
            if time.monotonic() > deadline:  # a provider trickling bytes: one read each under the timeout
                raise requests.Timeout(f"no whole answer within {TIMEOUT_S} s")
    try:
        return Answer(response.status_code, json.loads(b"".join(chunks)))
    except ValueError:
        return Answer(response.status_code, None)


def discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def discover(settings: OidcSettings, environment: str) -> dict[str, Any]:
    """The provider's discovery document, checked against the settings; ``ConfigError`` naming
    the setting it contradicts (an issuer without discovery names ``HAI_OIDC_ISSUER``). ID token
    algorithms are narrowed to ``SIGNING_ALGORITHMS``."""
    url = discovery_url(settings.issuer)
    try:
        answer = fetch_json(url, MAX_DISCOVERY)
    except requests.RequestException as exc:
        raise ConfigError("HAI_OIDC_ISSUER", f"no discovery document at {url}: {unanswered(exc)}") from None
    if answer.status != 200:
        raise ConfigError("HAI_OIDC_ISSUER", f"no discovery document at {url}: HTTP {answer.status}")
    if not isinstance(answer.body, dict):
        raise ConfigError("HAI_OIDC_ISSUER", f"the discovery document at {url} is not a JSON object of at most "
                                             f"{MAX_DISCOVERY} bytes")
    metadata = answer.body
    _check_metadata(metadata, settings, environment)
    listed = metadata.get("id_token_signing_alg_values_supported")
    allowed = [a for a in listed if a in SIGNING_ALGORITHMS] if isinstance(listed, list) else ["RS256"]
    if not allowed:
        raise ConfigError("HAI_OIDC_ISSUER", f"the provider signs ID tokens with no asymmetric algorithm "
                                             f"(it lists {shown(listed)}; accepted: {', '.join(SIGNING_ALGORITHMS)})")
    return {**metadata, "id_token_signing_alg_values_supported": allowed}


def unanswered(exc: requests.RequestException) -> str:
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
    for name in (*REQUIRED_ENDPOINTS, "end_session_endpoint"):
        endpoint = metadata.get(name)
        if endpoint is None and name == "end_session_endpoint":
            continue  # optional: logout then ends the session here only
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


class Provider:
    """The discovery document as this worker has it: read at start, and again (backing off) while
    it could not be read or did not agree. ``metadata()`` is None until then, ``problem`` says why."""

    def __init__(self, settings: OidcSettings, environment: str) -> None:
        self.settings = settings
        self.environment = environment
        self.problem: str | None = None
        self._metadata: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._retry_at = 0.0
        self._wait = RETRY_S[0]

    def metadata(self) -> dict[str, Any] | None:
        if self._metadata is not None or time.monotonic() < self._retry_at:
            return self._metadata
        with self._lock:
            if self._metadata is None and time.monotonic() >= self._retry_at:
                try:
                    self._metadata = discover(self.settings, self.environment)
                    self.problem = None
                except ConfigError as exc:
                    self.problem = exc.message
                    self._retry_at = time.monotonic() + self._wait
                    self._wait = min(RETRY_S[1], self._wait * 2)
                    logger.error("single sign-on is unavailable until the provider answers and agrees "
                                 "(asked again in %d s): %s", self._retry_at - time.monotonic(), exc)
        return self._metadata

    def logout_origin(self) -> str | None:
        """The origin of the end-session endpoint (CSP form-action: the logout form leads there), from
        the document this worker has: every response asks, so it never asks the provider itself."""
        metadata = self._metadata
        endpoint = metadata.get("end_session_endpoint") if metadata is not None else None
        if not isinstance(endpoint, str):
            return None
        parts = urlsplit(endpoint)
        if parts.scheme not in ("https", "http") or not HOST_PORT.fullmatch(parts.netloc):
            return None  # nothing that could write another directive into the header
        return f"{parts.scheme}://{parts.netloc}"
