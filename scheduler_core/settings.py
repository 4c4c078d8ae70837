"""Every ``HAI_*`` setting of the ``hai-scheduler`` commands and the dashboard, read and checked in
one place.

``read_settings`` is what ``serve``, its gunicorn workers, ``node``, ``db`` and ``create-user`` all
call: each value is checked with the project's validators before anything is bound, connected or
created, and a bad one raises the project's error naming where it came from (``--bind``,
``HAI_WORKERS``, ``HAI_CONFIG_FILE.ADMIN_PASSWORD``), printed as one line by the command line.
A command-line flag beats its variable; an empty variable counts as unset. Values stay what they
are written as: a password of digits is a string, never a number.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from scheduler_core.config import SchedulerConfig, groups_from_text
from scheduler_core.db import DatabaseConfig
from scheduler_core.errors import ConfigError, DatabaseConfigError, ReachConfigError, ReachError
from scheduler_core.oidc_settings import VARIABLES as SIGN_ON_VARIABLES
from scheduler_core.oidc_settings import SignOn, read_sign_on
from scheduler_core.validation import FieldError, check_bool, check_int, check_text, shown

DEFAULT_BIND = "127.0.0.1:8000"
ENVIRONMENTS = ("development", "production")
PATH_MAX = 4_096
MAX_PROXIES = 16  # HAI_TRUSTED_PROXIES: more proxies than this in front of one dashboard is a typo
METRICS_LOOPBACK = ("127.0.0.0/8", "::1/128")  # HAI_METRICS_ALLOW's default: scrapes from this host only
MAX_METRICS_NETWORKS = 64
METRICS_TOKEN_MIN = 16
# HAI_CONFIG_FILE holds dashboard settings only; these are read by the command line as well, so
# they come from the environment alone and every process agrees on them.
ENVIRONMENT_ONLY = ("DATABASE_URL", "HOOKS", "NODE_GROUPS", "BIND", "WORKERS", "THREADS", "ENV", "CONFIG_FILE")
# Every HAI_ variable the product reads. Others are not an error (tasks-as-code secrets are
# HAI_TASK_* references, a notification provider may read its password from any variable, and the
# README's API example uses HAI_TOKEN), but one within a typo of these is named on stderr.
VARIABLES = frozenset(f"HAI_{name}" for name in (
    "DATABASE_URL", "DATABASE_POOL_SIZE", "DATABASE_ACQUIRE_TIMEOUT_MS", "DATABASE_CONNECT_TIMEOUT_MS",
    "DATABASE_BUSY_TIMEOUT_MS", "DATABASE_TLS_CA", "DATABASE_TLS_CERT", "DATABASE_TLS_KEY", "DATABASE_TLS_VERIFY",
    "ENV", "E2E", "SECRET_KEY", "SECRET_KEY_FILE", "ADMIN_PASSWORD", "NEW_PASSWORD", "BIND", "WORKERS", "THREADS",
    "REACH_CONFIG", "CONFIG_FILE", "COOKIE_SECURE", "HOOKS", "NODE_GROUPS", "PUBLIC_URL", "TRUSTED_PROXIES",
    "METRICS_TOKEN", "METRICS_ALLOW", "API_RATE_LIMIT", *SIGN_ON_VARIABLES))
# HAI_CONFIG_FILE's keys the dashboard reads (other keys go to Flask's configuration as they are).
FILE_KEYS = ("ADMIN_PASSWORD", "SECRET_KEY", "COOKIE_SECURE", "REACH", "REACH_CONFIG", "PUBLIC_URL",
             "TRUSTED_PROXIES", "METRICS_TOKEN", "METRICS_ALLOW", "API_RATE_LIMIT", *SIGN_ON_VARIABLES)
# difflib's ratio: HAI_DATABSE_URL 0.97 and HAI_ADMIN_PASS 0.88 are typos; HAI_SMS_TOKEN (0.80) and
# HAI_TEST_WORKERS (0.81), someone's own variables, are not.
TYPO_CUTOFF = 0.85
_DATABASE_NUMBERS = ("pool_size", "acquire_timeout_ms", "connect_timeout_ms", "busy_timeout_ms")
_FLAG_NAMES = {"groups": "--group"}  # argparse destination -> the flag a person typed
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class Settings:
    """The checked settings. One line per field:"""

    database: DatabaseConfig  # HAI_DATABASE_URL (or --database-url) and HAI_DATABASE_*
    bind: str = DEFAULT_BIND  # HAI_BIND / --bind: serve's HOST:PORT, or unix:PATH
    workers: int = 2  # HAI_WORKERS / --workers: gunicorn worker processes, 1..256
    threads: int = 4  # HAI_THREADS: threads per worker, 1..256
    hooks: str | None = None  # HAI_HOOKS / --hooks: module:attribute (imported by serve and node)
    groups: tuple[str, ...] = ()  # HAI_NODE_GROUPS / --group: node groups of serve workers and node
    environment: str = "development"  # HAI_ENV: development | production
    admin_password: str | None = field(default=None, repr=False)  # HAI_ADMIN_PASSWORD: the first admin's
    secret_key: str | None = field(default=None, repr=False)  # HAI_SECRET_KEY: session signing key
    cookie_secure: bool = False  # HAI_COOKIE_SECURE; defaults to true in production
    reach_config: str | None = None  # HAI_REACH_CONFIG: a JSON file of notification settings
    public_url: str | None = None  # HAI_PUBLIC_URL: the dashboard's address, for links in alerts
    trusted_proxies: int = 0  # HAI_TRUSTED_PROXIES: proxies whose X-Forwarded-For names the client, 0..16
    metrics_token: str | None = field(default=None, repr=False)  # HAI_METRICS_TOKEN: bearer token for /metrics
    metrics_allow: tuple[str, ...] = METRICS_LOOPBACK  # HAI_METRICS_ALLOW: networks scraping without a token
    api_rate_limit: int = 600  # HAI_API_RATE_LIMIT: JSON API requests per token per minute, 1..1000000
    sign_on: SignOn = field(default_factory=SignOn)  # HAI_OIDC_* and HAI_LOCAL_LOGIN (oidc_settings.py)
    dashboard: Mapping[str, Any] = field(default_factory=dict, repr=False)  # HAI_CONFIG_FILE's object

    def dashboard_config(self) -> dict[str, Any]:
        """The Flask configuration these settings make: the file's keys, then the checked values."""
        values = dict(self.dashboard)
        values.update(HOOKS=self.hooks, NODE_GROUPS=self.groups, ADMIN_PASSWORD=self.admin_password,
                      COOKIE_SECURE=self.cookie_secure, REACH_CONFIG=self.reach_config, PUBLIC_URL=self.public_url,
                      TRUSTED_PROXIES=self.trusted_proxies, METRICS_TOKEN=self.metrics_token,
                      METRICS_ALLOW=self.metrics_allow, API_RATE_LIMIT=self.api_rate_limit, SIGN_ON=self.sign_on)
        if self.secret_key:
            values["SECRET_KEY"] = self.secret_key
        return values


def read_settings(flags: Any = None, environ: Mapping[str, str] | None = None) -> Settings:
    """The settings of ``environ`` (default ``os.environ``) and ``HAI_CONFIG_FILE``, with the
    command-line ``flags`` (an argparse namespace: ``database_url``, ``bind``, ``workers``,
    ``hooks``, ``groups``) on top. Raises the error of the first bad value, naming it."""
    source = _Source(os.environ if environ is None else environ, flags)
    environment = _environment(*source.env("ENV"))
    return _sign_on_needs(Settings(
        database=_database(source),
        bind=_bind(*source.pick("bind", "BIND", DEFAULT_BIND)),
        workers=_number(*source.pick("workers", "WORKERS", 2), 1, 256),
        threads=_number(*source.pick("threads", "THREADS", 4), 1, 256),
        hooks=_hooks(*source.pick("hooks", "HOOKS")),
        groups=_groups(*source.pick("groups", "NODE_GROUPS")),
        environment=environment,
        admin_password=_admin_password(*source.dashboard("ADMIN_PASSWORD")),
        secret_key=_optional_text(*source.dashboard("SECRET_KEY")),
        cookie_secure=_flag(*source.dashboard("COOKIE_SECURE"), default=environment == "production"),
        reach_config=_reach_file(*source.dashboard("REACH_CONFIG"), source.environ),
        public_url=_public_url(*source.dashboard("PUBLIC_URL")),
        trusted_proxies=_proxies(*source.dashboard("TRUSTED_PROXIES")),
        metrics_token=metrics_token(*source.dashboard("METRICS_TOKEN")),
        metrics_allow=metrics_networks(*source.dashboard("METRICS_ALLOW")),
        api_rate_limit=_api_rate_limit(*source.dashboard("API_RATE_LIMIT")),
        sign_on=read_sign_on(source.dashboard, environment),
        dashboard=_checked_file(source),
    ))


def _sign_on_needs(settings: Settings) -> Settings:
    """Single sign-on in production builds the addresses the provider sends browsers back to from
    HAI_PUBLIC_URL, never from a request's Host header."""
    if settings.sign_on.oidc is not None and settings.environment == "production" and not settings.public_url:
        raise ConfigError("HAI_PUBLIC_URL", "is required with single sign-on in production: the redirect URI "
                                            "registered at the provider is built from it")
    return settings


def likely_typos(environ: Mapping[str, str], file: Mapping[str, Any] | None = None) -> list[str]:
    """What looks like a misspelt setting and is therefore ignored: a ``HAI_`` variable the product
    does not read that is within a typo of one it does (``HAI_DATABSE_URL``, ``hai_workers``), and
    a ``HAI_CONFIG_FILE`` key within a typo of a dashboard setting. One line each, naming the
    field and the setting it resembles; the commands print them as warnings before they act."""
    found = []
    for name in sorted(environ):
        upper = name.upper()
        if name in VARIABLES or not upper.startswith("HAI_"):
            continue
        guess = upper if upper in VARIABLES else _closest(upper, VARIABLES)
        if guess:
            found.append(f"{_named(name)} is not a setting and is ignored: did you mean {guess}?")
    for key in sorted(file or {}):
        if key in FILE_KEYS or key in ENVIRONMENT_ONLY:
            continue
        guess = _closest(key.upper(), (*FILE_KEYS, *ENVIRONMENT_ONLY))
        if guess in ENVIRONMENT_ONLY:
            found.append(f"HAI_CONFIG_FILE.{_named(key)} is not a setting and is ignored: did you mean HAI_{guess} "
                         "(read from the environment only)?")
        elif guess:
            found.append(f"HAI_CONFIG_FILE.{_named(key)} is not a setting and is ignored: did you mean {guess}?")
    return found


def _closest(name: str, known: Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(name, sorted(known), n=1, cutoff=TYPO_CUTOFF)
    return matches[0] if matches else None


def _named(name: str) -> str:
    """A name as a warning shows it: quoted when a space, a control character or its length would
    hide what is wrong with it (``'HAI_WORKERS '``)."""
    return name if name.isidentifier() and len(name) <= 80 else shown(name)


def check_admin_password(value: Any, field: str = "HAI_ADMIN_PASSWORD") -> str:
    """The first admin's password meets the rule ``create-user`` applies (check_new_password)."""
    from scheduler_core.runtime.accounts import check_new_password

    try:
        return check_new_password(value, value)
    except ConfigError as exc:
        raise ConfigError(field, _bare(exc)) from None


def check_reach(values: Any, field: str, environ: Mapping[str, str] | None = None) -> None:
    """A notification configuration as ``Reach.init`` checks it, without a database."""
    from scheduler_core.reach import ReachConfig
    from scheduler_core.reach.providers import build_providers

    try:
        if not isinstance(values, Mapping):
            raise ReachConfigError("reach", f"must be a JSON object (got {type(values).__name__})")
        config = ReachConfig.parse(values)
        providers = build_providers(list(config.providers), environ)
        for template in config.templates:
            if template.provider not in providers:
                raise ReachConfigError(f"templates.{template.name}.provider",
                                       f"names no configured provider ({template.provider!r})")
    except ReachError as exc:
        if isinstance(exc, ReachConfigError):
            raise ReachConfigError(field, exc.message) from None
        raise type(exc)(f"{field}: {exc.message}") from None


class _Source:
    """Where a setting's value comes from: a flag, else HAI_CONFIG_FILE (dashboard keys only),
    else its ``HAI_`` variable; with the name an error shows."""

    def __init__(self, environ: Mapping[str, str], flags: Any) -> None:
        self.environ = environ
        self.flags = flags
        self.file: Mapping[str, Any] = _config_file(*self.env("CONFIG_FILE"))

    def env(self, name: str) -> tuple[str | None, str]:
        return self.environ.get(f"HAI_{name}") or None, f"HAI_{name}"

    def pick(self, flag: str, name: str, default: Any = None) -> tuple[Any, str]:
        given = getattr(self.flags, flag, None)
        if given is not None:
            return given, _FLAG_NAMES.get(flag, f"--{flag.replace('_', '-')}")
        value, where = self.env(name)
        return (default if value is None else value), where

    def dashboard(self, name: str) -> tuple[Any, str]:
        if name in self.file:
            return self.file[name], f"HAI_CONFIG_FILE.{name}"
        return self.env(name)


def _fail(where: str, message: str, error: FieldError = ConfigError) -> NoReturn:
    raise error(where, message)


def _bare(exc: ConfigError | ReachConfigError) -> str:
    """The message without the field the error already names (``password: ...`` -> ``...``)."""
    return exc.message.removeprefix(f"{exc.field}: ")


def _text(value: Any, where: str, longest: int = PATH_MAX) -> str:
    return check_text(value, where, longest, single_line=True).strip()


def _optional_text(value: Any, where: str) -> str | None:
    return None if value is None else _text(value, where)


def _number(value: Any, where: str, low: int, high: int) -> int:
    """An integer written as text (``"4"``) or given as one, in ``low..high``."""
    digits = value.strip().lstrip("+-") if isinstance(value, str) else ""
    if digits.isascii() and digits.isdigit():  # "²" and "٣" are digits to isdigit, not to int
        value = int(value.strip())
    return check_int(value, where, low, high)


def _proxies(value: Any, where: str) -> int:
    return 0 if value is None else _number(value, where, 0, MAX_PROXIES)


def metrics_token(value: Any, where: str = "HAI_METRICS_TOKEN") -> str | None:
    """The bearer token a scraper sends to ``/metrics``: at least 16 characters, no spaces."""
    if value is None:
        return None
    text = _text(value, where, 512)
    if len(text) < METRICS_TOKEN_MIN or any(c.isspace() for c in text):
        _fail(where, f"must be at least {METRICS_TOKEN_MIN} characters without spaces "
                     "(e.g. the output of: openssl rand -hex 32)")
    return text


def metrics_networks(value: Any, where: str = "HAI_METRICS_ALLOW") -> tuple[str, ...]:
    """The networks that may scrape ``/metrics`` without the token: comma-separated addresses or
    CIDRs (``10.0.0.0/8, ::1``); ``none`` for no network (the token only). Default: loopback."""
    if value is None:
        return METRICS_LOOPBACK
    items = value if isinstance(value, list | tuple) else _text(value, where).split(",")
    names = [item.strip() if isinstance(item, str) else item for item in items]
    if names == ["none"]:
        return ()
    if len(names) > MAX_METRICS_NETWORKS:
        _fail(where, f"at most {MAX_METRICS_NETWORKS} networks")
    networks = []
    for name in names:
        try:
            networks.append(str(ipaddress.ip_network(name, strict=False)))
        except (TypeError, ValueError):
            _fail(where, f"{shown(name)} is not an address or CIDR network (e.g. 10.0.0.0/8, ::1; "
                         "or none for the token only)")
    return tuple(networks)
def _api_rate_limit(value: Any, where: str) -> int:
    return Settings.api_rate_limit if value is None else _number(value, where, 1, 1_000_000)


def _flag(value: Any, where: str, *, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    return check_bool(value, where)


def _environment(value: str | None, where: str) -> str:
    chosen = (value or "development").strip().lower()
    if chosen not in ENVIRONMENTS:
        _fail(where, f"must be one of {', '.join(ENVIRONMENTS)} (got {shown(value)})")
    return chosen


def _bind(value: Any, where: str) -> str:
    """``HOST:PORT`` (``[::1]:8000`` for IPv6) or ``unix:PATH``. Never an empty host: gunicorn
    would take it as every interface, without saying so."""
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, str) and text.startswith("unix:") and text[5:].strip():
        return _text(text, where, 1_024)
    host, colon, port = text.rpartition(":") if isinstance(text, str) else ("", "", "")
    if not colon or not host.strip("[] ") or not port.isdigit() or not 1 <= int(port) <= 65535:
        _fail(where, f"must be HOST:PORT with a port between 1 and 65535, e.g. 127.0.0.1:8000 "
                     f"(0.0.0.0:8000 listens on every interface; got {shown(value)})")
    return _text(text, where, 1_024)


def _hooks(value: Any, where: str) -> str | None:
    """``module:attribute`` (serve and node import it; here only its form is checked)."""
    if value is None:
        return None
    text = _text(value, where, 512)
    module, colon, attribute = text.partition(":")
    if not colon or not module or not attribute:
        _fail(where, f"must be module:attribute, e.g. myapp.jobs:hooks (got {shown(text)})")
    return text


def _groups(value: Any, where: str) -> tuple[str, ...]:
    names = tuple(value) if isinstance(value, list | tuple) else groups_from_text(_optional_text(value, where))
    try:
        return SchedulerConfig(node_id="settings", groups=names).groups
    except ConfigError as exc:
        raise ConfigError(where, _bare(exc)) from None


def _public_url(value: Any, where: str) -> str | None:
    """An absolute http(s) address, used only to build links (e.g. https://scheduler.example)."""
    text = _optional_text(value, where)
    if text is not None and not text.startswith(("http://", "https://")):
        _fail(where, "must be an http:// or https:// address, e.g. https://scheduler.example")
    return text


def _admin_password(value: Any, where: str) -> str | None:
    return None if value is None else check_admin_password(value, where)


def _database(source: _Source) -> DatabaseConfig:
    """HAI_DATABASE_URL (or --database-url) and HAI_DATABASE_*; an error names the variable."""
    environ = dict(source.environ)
    url, where = source.pick("database_url", "DATABASE_URL")
    if url is not None:
        environ["HAI_DATABASE_URL"] = url
    try:
        return DatabaseConfig.from_env(environ)
    except DatabaseConfigError as exc:
        if exc.field in _DATABASE_NUMBERS or exc.field.startswith("tls."):
            raise DatabaseConfigError(f"HAI_DATABASE_{exc.field.replace('.', '_').upper()}", _bare(exc)) from None
        raise DatabaseConfigError(where, _bare(exc) if exc.field == "url" else exc.message) from None


def _read_json(value: Any, where: str, error: FieldError) -> Any:
    path = check_text(value, where, PATH_MAX, error, single_line=True)
    try:
        with open(path, encoding="utf-8") as source:
            return json.load(source)
    except OSError as exc:
        _fail(where, f"cannot read {path}: {exc.strerror or exc}", error)
    except ValueError as exc:
        _fail(where, f"{path} is not JSON: {exc}", error)


def _config_file(value: str | None, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    loaded = _read_json(value, where, ConfigError)
    if not isinstance(loaded, Mapping):
        _fail(where, f"must hold a JSON object of dashboard settings (got {type(loaded).__name__})")
    for key in loaded:
        if key in ENVIRONMENT_ONLY or key.startswith("DATABASE_"):
            _fail(f"{where}.{key}", f"is read from the environment only: set HAI_{key} instead")
    return loaded


def _checked_file(source: _Source) -> Mapping[str, Any]:
    """HAI_CONFIG_FILE's object; its ``REACH`` is checked as HAI_REACH_CONFIG's content is."""
    if source.file.get("REACH") is not None:
        check_reach(source.file["REACH"], "HAI_CONFIG_FILE.REACH", source.environ)
    return source.file


def _reach_file(value: Any, where: str, environ: Mapping[str, str]) -> str | None:
    if value is None:
        return None
    check_reach(_read_json(value, where, ReachConfigError), where, environ)
    return str(value)
