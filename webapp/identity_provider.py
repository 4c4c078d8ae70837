"""The identity provider as the dashboard knows it: its discovery document, and bounded reads of
what it answers (every answer is untrusted input: size and time are capped).

``discover`` is strict and runs once in ``serve`` before any worker starts: a provider that does
not answer or does not agree stops start-up with the setting it contradicts. A worker never fails
to boot because of the provider (a restart during an outage would take the scheduler down with
it): ``Provider`` asks again, backing off, and until it has an answer single sign-on says it is
unavailable while local accounts keep working. ID tokens are accepted only with an asymmetric
signature (``SIGNING_ALGORITHMS``), whatever the discovery document lists. What Authlib asks the
provider itself (the token endpoint, the JWKS) goes through ``BoundedSession``: the same caps.
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
import urllib3.exceptions
from authlib.integrations.requests_client import OAuth2Session

from scheduler_core.errors import ConfigError
from scheduler_core.oidc_settings import OidcSettings
from scheduler_core.validation import shown

logger = logging.getLogger(__name__)
TIMEOUT_S = 10  # the whole of one request to the provider (discovery, userinfo)
MAX_DISCOVERY = 256 * 1024  # bytes of a discovery document read
MAX_USERINFO = 64 * 1024  # bytes of a userinfo answer read
MAX_ANSWER = 256 * 1024  # bytes of a token endpoint's or JWKS answer read (through Authlib)
RETRY_S = (5, 300)  # a worker without the discovery document asks again: first after 5 s, doubling to 5 minutes
SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
REQUIRED_ENDPOINTS = ("authorization_endpoint", "token_endpoint", "jwks_uri", "userinfo_endpoint")
HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?")


class AnswerTooLarge(requests.RequestException):
    """The provider's answer is larger than this dashboard reads."""


def read_capped(response: requests.Response, limit: int) -> bytes:
    """The body of a streamed ``response``: at most ``limit`` bytes (``AnswerTooLarge``), whole
    within ``TIMEOUT_S`` from now (``requests.Timeout``; each read returns what has come, so a
    provider trickling bytes is stopped within one more read's timeout, not at its own pace)."""
    deadline = time.monotonic() + TIMEOUT_S
    chunks, size = [], 0
    while chunk := _read1(response):
        size += len(chunk)
        if size > limit or time.monotonic() > deadline:
            response.close()
            if size > limit:
                raise AnswerTooLarge(f"the answer is larger than {limit} bytes", response=response)
            raise requests.Timeout(f"no whole answer within {TIMEOUT_S} s", response=response)
        chunks.append(chunk)
    return b"".join(chunks)


def _read1(response: requests.Response) -> bytes:
    """What has come of the body (b"" at its end); urllib3's errors as requests' (what the callers
    catch, as requests' own reading raises them)."""
    try:
        chunk: bytes = response.raw.read1(8192, decode_content=True)
    except urllib3.exceptions.ReadTimeoutError as exc:
        raise requests.Timeout(f"the answer stopped for {TIMEOUT_S} s", response=response) from exc
    except urllib3.exceptions.DecodeError as exc:
        raise requests.exceptions.ContentDecodingError(str(exc), response=response) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:  # the connection broke off, a bad chunk
        raise requests.exceptions.ChunkedEncodingError(str(exc), response=response) from exc
    return chunk


def read_bounded(response: requests.Response, *args: Any, **kwargs: Any) -> requests.Response:
    """A response hook (``BoundedSession``): the body is read here, before requests reads it
    whole, by ``read_capped`` (``MAX_ANSWER``)."""
    response._content = read_capped(response, MAX_ANSWER)  # what .content, .json() and Authlib read
    return response


class BoundedSession(OAuth2Session):  # type: ignore[misc]
    """Authlib's session to the provider, every answer read by ``read_bounded``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hooks["response"].append(read_bounded)


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any  # the parsed JSON, or None (not JSON, or too large)


def fetch_json(url: str, limit: int, headers: dict[str, str] | None = None) -> Answer:
    """GET ``url`` (no redirects) within ``TIMEOUT_S`` in all and ``limit`` bytes; raises
    ``requests.RequestException`` when it does not answer in time."""
    with requests.get(url, headers=headers, timeout=TIMEOUT_S, stream=True, allow_redirects=False) as response:
        try:
            body = read_capped(response, limit)
        except AnswerTooLarge:
            return Answer(response.status_code, None)
    try:
        return Answer(response.status_code, json.loads(body))
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
