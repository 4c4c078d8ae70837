"""Masking secrets wherever a definition or configuration is shown or logged.

A value is secret when its name looks like one (Authorization, Cookie, anything with key,
token, secret, password, auth, session or credential in it), wherever it appears: handler
headers, task params, URL credentials. Masked copies are for display only; the stored
definition keeps the real values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from scheduler_core.errors import ConfigError

MASK = "***"
_SECRET_NAME = re.compile(r"authorization|cookie|key|token|secret|passw|auth|session|credential", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def _token_like(segment: str) -> bool:
    """A path segment that looks like a credential: long, letters and digits mixed (the token
    of a Slack / Discord / Teams style webhook URL, ``/services/T0/B0/<token>``)."""
    return len(segment) >= 16 and any(c.isdigit() for c in segment) and any(c.isalpha() for c in segment)


def mask_url(url: str) -> str:
    """``url`` fit for display: the password of its userinfo (``user:password@``), the values of
    secret-named query parameters and token-like path segments replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.scheme or not parts.netloc:
        return url
    userinfo, at, hostport = parts.netloc.rpartition("@")
    user, colon, _password = userinfo.partition(":")
    netloc = f"{user}:{MASK}@{hostport}" if at and colon else parts.netloc
    path = "/".join(MASK if _token_like(segment) else segment for segment in parts.path.split("/"))
    query = "&".join(f"{key}={MASK}" if equals and is_secret_name(key) else f"{key}{equals}{value}"
                     for key, equals, value in (item.partition("=") for item in parts.query.split("&"))
                     ) if parts.query else ""
    return urlunsplit(parts._replace(netloc=netloc, path=path, query=query))


def mask_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``headers`` with the value of every credential-like header replaced by ``***``."""
    return {name: MASK if is_secret_name(str(name)) else value for name, value in headers.items()}


def mask_values(value: Any) -> Any:
    """A copy of a JSON-like value with every secret-named entry's value masked."""
    if isinstance(value, Mapping):
        return {k: MASK if isinstance(k, str) and is_secret_name(k) else mask_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_values(v) for v in value]
    if isinstance(value, str) and "://" in value:
        return mask_url(value)
    return value


def masked_handler(handler: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A handler config fit for display: secret headers, URL passwords and secret-named fields masked."""
    return None if handler is None else dict(mask_values(handler))


# --- free text (an error message, a log line) ---------------------------------------------

# Names and schemes are bounded (64 and 32 characters): unbounded, each pattern tried at every
# position of a long run of name characters scanned the rest of the run each time, quadratic in
# its length (16 KiB of letters took 15 s). A longer name is matched by its last 64 characters.
_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]{0,31}://[^\s'\"<>]+")
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]{0,31}://)(?P<user>[^/\s:@]*):[^/\s@]*@")
_SECRET_ASSIGNMENT = re.compile(
    r"(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,63})(?P<sep>[\"']?\s*[=:]\s*)(?P<value>\"[^\"]*\"|'[^']*'|[^\s,;&}]+)")
_NOT_A_NAME = re.compile(r"(Error|Exception|Warning)$")
_BEARER = re.compile(r"\b(?P<kind>Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)


def mask_text(text: str | None) -> str | None:
    """Free text (an error message) with URL passwords, credentials and secret assignments masked."""
    if text is None:
        return None
    masked = _URL.sub(lambda m: mask_url(m.group(0)), text)  # passwords, secret query values, token paths
    masked = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", masked)  # unparsable URLs too
    masked = _BEARER.sub(lambda m: f"{m['kind']} {MASK}", masked)
    return _SECRET_ASSIGNMENT.sub(_masked_assignment, masked)


def _masked_assignment(match: re.Match[str]) -> str:
    name = match["name"]
    if not is_secret_name(name) or _NOT_A_NAME.search(name):  # "KeyError: 'x'" names no secret
        return match.group(0)
    return f"{name}{match['sep']}{MASK}"


# --- masked secrets sent back through an edit form ----------------------------------------


def restore_masked(submitted: Any, stored: Any, field: str) -> Any:
    """``submitted`` with masked values put back from ``stored``.

    A form shows definitions masked (``task.masked()``): a secret-named entry reads ``***``
    and a URL's password ``user:***@``. Sent back unchanged, they mean "keep the stored
    value". A masked value with nothing stored to keep is refused, naming its path, so the
    mask itself is never stored as a secret. Header-like names match in any case.
    """
    if isinstance(submitted, Mapping):
        stored_map = stored if isinstance(stored, Mapping) else {}
        return {key: _restore_entry(key, value, stored_map, f"{field}.{key}") for key, value in submitted.items()}
    if isinstance(submitted, list):
        stored_list = stored if isinstance(stored, list | tuple) else []
        return [restore_masked(item, stored_list[index] if index < len(stored_list) else None, f"{field}[{index}]")
                for index, item in enumerate(submitted)]
    if isinstance(submitted, str) and "://" in submitted:
        if isinstance(stored, str) and stored != submitted and mask_values(stored) == submitted:
            return stored
        if _has_masked_password(submitted):
            raise ConfigError(field, "holds a masked password (***): type the password again")
    return submitted


def _restore_entry(key: Any, value: Any, stored: Mapping[str, Any], path: str) -> Any:
    match = _stored_key(key, stored)
    if isinstance(key, str) and is_secret_name(key) and value == MASK:
        if match is None:
            raise ConfigError(path, "is masked (***): type the value again")
        return stored[match]
    return restore_masked(value, stored[match] if match is not None else None, path)


def _stored_key(key: Any, stored: Mapping[str, Any]) -> str | None:
    if key in stored:
        return str(key)
    if isinstance(key, str):
        return next((k for k in stored if isinstance(k, str) and k.lower() == key.lower()), None)
    return None


def _has_masked_password(url: str) -> bool:
    try:
        return urlsplit(url).password == MASK
    except ValueError:
        return False
