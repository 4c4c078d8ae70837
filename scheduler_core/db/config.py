"""Validated database configuration.

A :class:`DatabaseConfig` comes from a URL, from fields, or from ``HAI_DATABASE_*``
environment variables. Every invalid value raises :class:`DatabaseConfigError` naming the
field; nothing is connected or created by validation. :meth:`DatabaseConfig.redacted`
is the only form fit for display: it masks passwords, URL credentials and TLS keys.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, NoReturn
from urllib.parse import quote

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from scheduler_core.errors import DatabaseConfigError
from scheduler_core.masking import MASK
from scheduler_core.validation import check_int, check_text, shown

DatabaseType = Literal["sqlite", "postgresql", "mysql"]

MAX_TIMEOUT_MS = 2_147_483_647
SETTING_MAX = 4_096  # a host, user, password, database name or path
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}
# URL scheme (before "+driver") -> our type, and the one driver we ship for it.
_SCHEMES = {
    "sqlite": "sqlite",
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "mysql": "mysql",
    "mariadb": "mysql",
}
_DRIVERS = {"sqlite": ("pysqlite",), "postgresql": ("psycopg",), "mysql": ("pymysql",)}
# libpq's target_session_attrs: the scheduler writes, so only the values that land on a primary.
SESSION_ATTRS_KNOWN = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")
SESSION_ATTRS_WRITABLE = ("read-write", "primary")
MAX_HOSTS = 16
_SA_DRIVERNAMES = {"sqlite": "sqlite", "postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql"}


@dataclass(frozen=True)
class TlsConfig:
    """TLS settings for PostgreSQL and MySQL (file paths, as the drivers take them)."""

    ca: str | None = None  # CA bundle used to verify the server certificate
    cert: str | None = None  # client certificate (needs ``key``)
    key: str | None = None  # client private key (needs ``cert``); masked in snapshots
    verify: bool = True  # verify the certificate chain and the host name

    def __post_init__(self) -> None:
        for name in ("ca", "cert", "key"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                _fail(f"tls.{name}", "must be a non-empty file path", value)
        if not isinstance(self.verify, bool):
            _fail("tls.verify", "must be true or false", self.verify)
        if (self.cert is None) != (self.key is None):
            _fail("tls.cert" if self.cert is None else "tls.key", "tls.cert and tls.key go together")


@dataclass(frozen=True)
class DatabaseConfig:
    """Where the shared database is and how to talk to it. One line per field:"""

    type: DatabaseType  # sqlite | postgresql | mysql (MariaDB is "mysql")
    database: str  # SQLite file path, or the database name on the server
    host: str | None = None  # server host (PostgreSQL / MySQL); default 127.0.0.1
    port: int | None = None  # server port; default 5432 / 3306
    hosts: tuple[tuple[str, int], ...] | None = None  # PostgreSQL: a cluster's hosts, tried in order (libpq)
    target_session_attrs: str | None = None  # PostgreSQL: read-write (the default with hosts) or primary
    user: str | None = None
    password: str | None = field(default=None, repr=False)  # masked in snapshots
    pool_size: int = 16  # connections kept per process, 1..1000
    acquire_timeout_ms: int = 10_000  # wait for a pooled connection, 1..2147483647
    connect_timeout_ms: int = 10_000  # establishing one connection, 1..2147483647
    busy_timeout_ms: int = 30_000  # SQLite: wait for the file's write lock, 1..2147483647
    tls: TlsConfig | None = None  # None = driver default (no TLS requested)

    def __post_init__(self) -> None:
        if self.type not in _DRIVERS:
            _fail("type", "must be one of sqlite, postgresql, mysql", self.type)
        _check_text("database", self.database)
        if self.type == "sqlite":
            self._check_sqlite()
        else:
            self._check_server()
        _check_int("pool_size", self.pool_size, 1, 1000)
        _check_int("acquire_timeout_ms", self.acquire_timeout_ms, 1, MAX_TIMEOUT_MS)
        _check_int("connect_timeout_ms", self.connect_timeout_ms, 1, MAX_TIMEOUT_MS)
        _check_int("busy_timeout_ms", self.busy_timeout_ms, 1, MAX_TIMEOUT_MS)
        if self.tls is not None and not isinstance(self.tls, TlsConfig):
            _fail("tls", "must be a TlsConfig or a mapping", self.tls)

    def _check_sqlite(self) -> None:
        if self.database == ":memory:" or self.database.startswith("file::memory:"):
            _fail("database", "an in-memory SQLite database cannot be shared by connections; give a file path")
        for name in ("host", "port", "user", "password", "tls"):
            if getattr(self, name) is not None:
                _fail(name, "does not apply to SQLite")

    def _check_server(self) -> None:
        if self.host is not None:
            _check_text("host", self.host)
        if self.port is not None:
            _check_int("port", self.port, 1, 65535)
        if self.hosts is not None:
            self._check_hosts()
        if self.target_session_attrs is not None:
            _check_session_attrs(self.type, self.target_session_attrs)
        elif self.hosts is not None:  # several hosts: the scheduler needs the writable one
            object.__setattr__(self, "target_session_attrs", "read-write")
        if self.user is not None:
            _check_text("user", self.user)
        if self.password is not None:
            check_text(self.password, "password", SETTING_MAX, DatabaseConfigError, blank=True)

    def _check_hosts(self) -> None:
        if self.type != "postgresql":
            _fail("hosts", "a list of hosts is for PostgreSQL (libpq tries them in order); for MariaDB give the "
                           "one address of the cluster's proxy or virtual IP")
        if self.host is not None or self.port is not None:
            _fail("hosts", "give host and port, or hosts, not both")
        if not isinstance(self.hosts, tuple | list) or not 1 <= len(self.hosts) <= MAX_HOSTS:
            _fail("hosts", f"must be a list of 1 to {MAX_HOSTS} hosts, each host:port or a (host, port) pair",
                  self.hosts)
        checked = []
        for index, entry in enumerate(self.hosts):
            if isinstance(entry, str):  # "host:port", as in a URL
                entry = _host_entry(entry, index, self.type)
            if not isinstance(entry, tuple | list) or len(entry) != 2:
                _fail(f"hosts[{index}]", "must be a (host, port) pair", entry)
            host, port = entry
            _check_text(f"hosts[{index}].host", host)
            if any(c in host for c in ",/?#@ ") or host != host.strip():
                _fail(f"hosts[{index}].host", "must be a host name or address", host)
            _check_int(f"hosts[{index}].port", port, 1, 65535)
            checked.append((host, port))
        object.__setattr__(self, "hosts", tuple(checked))

    # --- constructors ----------------------------------------------------------

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> DatabaseConfig:
        """Parse ``sqlite:///file.db``, ``postgresql://u:p@h:5432/db``, ``mysql://...``."""
        return cls.from_mapping({"url": url, **overrides})

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> DatabaseConfig:
        """Build from a mapping of fields; a ``url`` key supplies the connection fields."""
        data = dict(values)
        known = {f.name for f in fields(cls)} | {"url"}
        for key in data:
            if key not in known:
                _fail(key, "is not a database setting")
        url = data.pop("url", None)
        if url is not None:
            data = {**_fields_from_url(url), **{k: v for k, v in data.items() if v is not None}}
        if isinstance(data.get("tls"), Mapping):
            data["tls"] = _tls_from_mapping(data["tls"])
        if "type" not in data:
            _fail("type", "is required (or give url)")
        if "database" not in data:
            _fail("database", "is required")
        return cls(**data)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DatabaseConfig:
        """Read ``HAI_DATABASE_URL`` (default ``sqlite:///scheduler.db``) and ``HAI_DATABASE_*``."""
        env = os.environ if environ is None else environ
        data: dict[str, Any] = {"url": env.get("HAI_DATABASE_URL") or "sqlite:///scheduler.db"}
        for name in ("pool_size", "acquire_timeout_ms", "connect_timeout_ms", "busy_timeout_ms"):
            raw = env.get(f"HAI_DATABASE_{name.upper()}")
            if raw:
                data[name] = _int_from_text(name, raw)
        tls = {k: env[f"HAI_DATABASE_TLS_{k.upper()}"] for k in ("ca", "cert", "key", "verify")
               if env.get(f"HAI_DATABASE_TLS_{k.upper()}")}
        if tls:
            data["tls"] = tls
        config = cls.from_mapping(data)
        check_production_guard(config, env)
        return config

    # --- derived views -----------------------------------------------------------

    def sqlite_path(self) -> str:
        """The SQLite file as an absolute path. A relative path is taken from the current working
        directory, the same for every entry point: the library, every command, and the dashboard
        (Flask-SQLAlchemy would otherwise put it under the app's ``instance/`` folder)."""
        return os.path.abspath(self.database)

    def sqlalchemy_url(self) -> URL:
        """The SQLAlchemy URL with our driver for this type (contains the password); a SQLite
        path is absolute (:meth:`sqlite_path`)."""
        if self.type == "sqlite":
            return URL.create("sqlite", database=self.sqlite_path())
        query: dict[str, Any] = {}
        if self.target_session_attrs is not None:
            query["target_session_attrs"] = self.target_session_attrs
        if self.hosts is not None:  # libpq's multi-host form, which SQLAlchemy passes on to psycopg
            return URL.create(_SA_DRIVERNAMES[self.type], username=self.user, password=self.password,
                              database=self.database,
                              query={"host": [f"{_url_host(h)}:{p}" for h, p in self.hosts], **query})
        return URL.create(
            _SA_DRIVERNAMES[self.type],
            username=self.user,
            password=self.password,
            host=self.host or "127.0.0.1",
            port=self.port or DEFAULT_PORTS[self.type],
            database=self.database,
            query=query,
        )

    def redacted(self) -> dict[str, Any]:
        """A snapshot safe to show or log: no password, URL credential or TLS key."""
        snapshot = asdict(self)
        if self.password is not None:
            snapshot["password"] = MASK
        if self.tls is not None and self.tls.key is not None:
            snapshot["tls"]["key"] = MASK
        snapshot["url"] = self.display_url()
        if self.hosts is not None:
            snapshot["hosts"] = [f"{_url_host(h)}:{p}" for h, p in self.hosts]
        return snapshot

    def display_url(self) -> str:
        """The URL as a person writes it (libpq style for several hosts), the password masked."""
        if self.type == "sqlite" or self.hosts is None:
            return self.sqlalchemy_url().render_as_string(hide_password=True)
        user = self.sqlalchemy_url().set(drivername="x", query={}).render_as_string(hide_password=True)
        userinfo = user.removeprefix("x://").partition("@")[0] + "@" if self.user else ""
        hosts = ",".join(f"{_url_host(h)}:{p}" for h, p in self.hosts)
        return (f"{_SA_DRIVERNAMES[self.type]}://{userinfo}{hosts}/{quote(self.database, safe='')}"
                f"?target_session_attrs={self.target_session_attrs}")



def check_production_guard(config: DatabaseConfig, environ: Mapping[str, str] | None = None) -> None:
    """``HAI_ENV=production`` refuses SQLite (one host only) unless ``HAI_E2E=1``."""
    env = os.environ if environ is None else environ
    if config.type == "sqlite" and is_production(env) and env.get("HAI_E2E") != "1":
        _fail("type", "SQLite is refused when HAI_ENV=production: it cannot be shared across hosts; "
                      "use PostgreSQL or MySQL (HAI_E2E=1 exempts end-to-end tests)")


def is_production(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get("HAI_ENV", "").strip().lower() == "production"


def parse_database_config(value: str | Mapping[str, Any] | DatabaseConfig) -> DatabaseConfig:
    if isinstance(value, DatabaseConfig):
        return value
    if isinstance(value, str):
        return DatabaseConfig.from_url(value)
    if isinstance(value, Mapping):
        return DatabaseConfig.from_mapping(value)
    _fail("database", "give a URL string, a mapping or a DatabaseConfig", type(value).__name__)


# --- helpers ---------------------------------------------------------------------


def _fields_from_url(url: Any) -> dict[str, Any]:
    check_text(url, "url", SETTING_MAX, DatabaseConfigError)
    url, hosts = _split_host_list(url)
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        _fail("url", "is not a database URL (expected e.g. postgresql://user@host:5432/db, or "
                     "postgresql://user@host1:5432,host2:5432/db for a cluster)")
    scheme, _, driver = parsed.drivername.partition("+")
    db_type = _SCHEMES.get(scheme)
    if db_type is None:
        _fail("url", f"unsupported database type {scheme!r}; use sqlite, postgresql or mysql")
    if driver and driver not in _DRIVERS[db_type]:
        _fail("url", f"driver {driver!r} is not supported for {db_type}; use {_DRIVERS[db_type][0]}")
    query = dict(parsed.query)
    attrs = query.pop("target_session_attrs", None)
    if query:
        _fail("url", f"query parameter {sorted(query)[0][:40]!r} is not accepted; use the configuration fields "
                     "instead (target_session_attrs is the one a PostgreSQL URL may carry)")
    if db_type == "sqlite":
        if hosts is not None:
            _fail("hosts", "do not apply to SQLite (one file on one host)")
        if attrs is not None:
            _fail("target_session_attrs", "does not apply to SQLite")
        if not parsed.database:
            _fail("database", "an in-memory SQLite database cannot be shared by connections; give a file path")
        return {"type": "sqlite", "database": parsed.database}
    if not parsed.database:
        _fail("database", "is required in the URL path (…/dbname)")
    if not isinstance(attrs, str | None):
        _fail("target_session_attrs", "is given more than once")
    fields_: dict[str, Any] = {"type": db_type, "database": parsed.database, "user": parsed.username,
                               "password": parsed.password, "target_session_attrs": attrs}
    if hosts is not None:
        return {**fields_, "hosts": hosts}
    return {**fields_, "host": parsed.host, "port": parsed.port}


def _split_host_list(url: str) -> tuple[str, tuple[tuple[str, int], ...] | None]:
    """A libpq multi-host URL (``scheme://user@h1:5432,h2:5433/db``) as the URL with one placeholder
    host, and its hosts; any other URL as it is and None. Each host is named in an error by its place."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url, None
    authority, slash, tail = rest.partition("/")
    userinfo, at, hostlist = authority.rpartition("@")
    if "," not in hostlist:
        return url, None
    hosts = []
    for index, entry in enumerate(hostlist.split(",")):
        hosts.append(_host_entry(entry, index, _SCHEMES.get(scheme.partition("+")[0], "postgresql")))
    return f"{scheme}://{userinfo}{at}cluster{slash}{tail}", tuple(hosts)


def _host_entry(entry: str, index: int, db_type: str) -> tuple[str, int]:
    field_ = f"hosts[{index}]"
    if not entry:
        _fail(field_, "is empty (two commas, or a comma at an end of the host list)")
    if entry.startswith("["):  # [IPv6]:port
        host, close, after = entry[1:].partition("]")
        if not close or (after and not after.startswith(":")):
            _fail(field_, "is not [IPv6 address]:port", entry)
        port_text = after[1:]
    else:
        host, colon, port_text = entry.rpartition(":") if ":" in entry else (entry, "", "")
        if colon and ":" in host:
            _fail(field_, "an IPv6 address goes in brackets: [::1]:5432", entry)
    if not host:
        _fail(f"{field_}.host", "is empty", entry)
    if port_text == "" and not entry.endswith(":"):
        return host, DEFAULT_PORTS.get(db_type, 5432)
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
        _fail(f"{field_}.port", "must be a port number, 1 to 65535", port_text)
    return host, int(port_text)


def _check_session_attrs(db_type: str, value: Any) -> None:
    if db_type != "postgresql":
        _fail("target_session_attrs", "is a PostgreSQL (libpq) setting", value)
    if value not in SESSION_ATTRS_KNOWN:
        _fail("target_session_attrs", f"must be one of {', '.join(SESSION_ATTRS_WRITABLE)} (libpq knows "
                                      f"{', '.join(SESSION_ATTRS_KNOWN)})", value)
    if value not in SESSION_ATTRS_WRITABLE:
        _fail("target_session_attrs", f"must be {' or '.join(SESSION_ATTRS_WRITABLE)}: the scheduler writes, so it "
                                      "must land on the primary", value)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _tls_from_mapping(values: Mapping[str, Any]) -> TlsConfig:
    allowed = {f.name for f in fields(TlsConfig)}
    for key in values:
        if key not in allowed:
            _fail(f"tls.{key}", "is not a TLS setting")
    data = dict(values)
    if isinstance(data.get("verify"), str):
        data["verify"] = _bool_from_text("tls.verify", data["verify"])
    return TlsConfig(**data)


def _check_text(name: str, value: Any) -> None:
    check_text(value, name, SETTING_MAX, DatabaseConfigError)  # never shows the value: it may be a secret


def _check_int(name: str, value: Any, low: int, high: int) -> None:
    check_int(value, name, low, high, DatabaseConfigError)


def _int_from_text(name: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        _fail(name, "must be an integer", raw)


def _bool_from_text(name: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    _fail(name, "must be true or false", raw)


_NO_VALUE = object()


def _fail(name: str, message: str, value: Any = _NO_VALUE) -> NoReturn:
    if value is not _NO_VALUE and name not in ("password", "tls.key"):
        message = f"{message} (got {shown(value)})"
    raise DatabaseConfigError(name, message)
