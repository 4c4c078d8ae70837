"""Real-database fixtures: one parametrised fixture over sqlite, postgresql and mysql.

Servers come, in this order, from ``HAI_TEST_POSTGRES_URL`` / ``HAI_TEST_MYSQL_URL``, from
testcontainers when a Docker engine answers, or from the local servers on their default
ports. A backend that is nowhere is skipped with the reason; ``HAI_TEST_REQUIRE=postgresql,mysql``
turns that skip into a failure (CI sets it).

Every test gets a clean database of its own: a file in ``tmp_path`` for SQLite, a fresh
database for PostgreSQL (cloned from a migrated template when the test wants the schema)
and MySQL (its tables made from a migrated template's DDL: MariaDB has no template databases).
Teardown checks that the test left no connection checked out.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine, make_url

from scheduler_core.db import close_engine, create_engine, upgrade

BACKENDS = ("sqlite", "postgresql", "mysql")
_ENV_URLS = {"postgresql": "HAI_TEST_POSTGRES_URL", "mysql": "HAI_TEST_MYSQL_URL"}
_LOCAL_URLS = {"postgresql": "postgresql://postgres@127.0.0.1:5432/test", "mysql": "mysql://root@127.0.0.1:3306/test"}


@dataclass
class Server:
    """Where a database server is, or why it is not available."""

    kind: str
    url: str | None  # URL of a maintenance database we may create databases from
    origin: str  # env | testcontainers | local
    reason: str = ""


_servers: dict[str, Server] = {}
_containers: list[object] = []


def _required() -> set[str]:
    return {name.strip() for name in os.environ.get("HAI_TEST_REQUIRE", "").split(",") if name.strip()}


def _reachable(url: str) -> str | None:
    try:
        engine = create_engine({"url": url, "connect_timeout_ms": 3000})
    except Exception as exc:
        return str(exc)
    close_engine(engine)
    return None


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


def _container_url(kind: str) -> str:
    if kind == "postgresql":
        from testcontainers.postgres import PostgresContainer

        pg = PostgresContainer("postgres:16-alpine", username="postgres", password="postgres", dbname="test")
        pg.start()
        _containers.append(pg)
        return f"postgresql://postgres:postgres@{pg.get_container_host_ip()}:{pg.get_exposed_port(5432)}/test"
    from testcontainers.mysql import MySqlContainer

    my = MySqlContainer("mariadb:11", root_password="root", dbname="test")
    my.start()
    _containers.append(my)
    return f"mysql://root:root@{my.get_container_host_ip()}:{my.get_exposed_port(3306)}/test"


def _resolve(kind: str) -> Server:
    env_url = os.environ.get(_ENV_URLS[kind])
    if env_url:
        problem = _reachable(env_url)
        return Server(kind, None if problem else env_url, "env", problem or "")
    if _docker_answers():
        try:
            return Server(kind, _container_url(kind), "testcontainers")
        except Exception as exc:
            container_problem = f"testcontainers failed: {exc}"
    else:
        container_problem = "no Docker engine answers"
    problem = _reachable(_LOCAL_URLS[kind])
    if problem is None:
        return Server(kind, _LOCAL_URLS[kind], "local")
    return Server(kind, None, "none", f"{_ENV_URLS[kind]} unset; {container_problem}; local server: {problem}")


def server(kind: str) -> Server:
    """The server for ``kind``; skips (or fails, when required) if there is none."""
    if kind not in _servers:
        _servers[kind] = _resolve(kind)
    found = _servers[kind]
    if found.url is None:
        message = f"{kind} unavailable: {found.reason}"
        if kind in _required():
            pytest.fail(f"{message} (required by HAI_TEST_REQUIRE)")
        pytest.skip(message)
    return found


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for container in _containers:
        container.stop()  # type: ignore[attr-defined]


# --- per-test databases ------------------------------------------------------------


def _admin_engine(kind: str) -> Engine:
    url = server(kind).url
    assert url is not None
    return create_engine({"url": url, "pool_size": 1})


def _with_database(url: str, database: str) -> str:
    return make_url(url).set(database=database).render_as_string(hide_password=False)


def create_database(kind: str, template: str | None = None) -> str:
    """Create an empty database (or a copy of ``template`` on PostgreSQL); return its URL."""
    name = f"hai_t_{uuid.uuid4().hex[:12]}"
    admin = _admin_engine(kind)
    try:
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            suffix = f" TEMPLATE {template}" if template else ""
            conn.execute(text(f"CREATE DATABASE {name}{suffix}"))
    finally:
        close_engine(admin)
    return _with_database(server(kind).url or "", name)


def drop_database(kind: str, url: str) -> None:
    name = make_url(url).database
    admin = _admin_engine(kind)
    try:
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            force = " WITH (FORCE)" if kind == "postgresql" else ""
            conn.execute(text(f"DROP DATABASE IF EXISTS {name}{force}"))
    finally:
        close_engine(admin)


_pg_template: dict[str, str] = {}


def _migrated_pg_template() -> str:
    """A migrated PostgreSQL database that per-test databases are cloned from (once per run)."""
    if "name" not in _pg_template:
        url = create_database("postgresql")
        engine = create_engine(url)
        try:
            upgrade(engine)
        finally:
            close_engine(engine)
        _pg_template["name"] = make_url(url).database or ""
        _pg_template["url"] = url
    return _pg_template["name"]


_mysql_template: dict[str, Any] = {}


def _migrated_mysql_template() -> dict[str, Any]:
    """A migrated MariaDB database per test process, and what a copy of it takes: each table's
    ``SHOW CREATE TABLE`` (its columns, keys, collation; no AUTO_INCREMENT counter) and the tables
    the migrations put rows in. MariaDB has no CREATE DATABASE ... TEMPLATE: a per-test database
    is built from these in about 0.2 s, where running the migrations takes about 3 s."""
    if "name" not in _mysql_template:
        url = create_database("mysql")
        engine = create_engine(url)
        try:
            upgrade(engine)
            with engine.connect() as conn:
                tables = list(conn.execute(text("SHOW TABLES")).scalars())
                ddl = [re.sub(r" AUTO_INCREMENT=\d+", "", conn.execute(text(f"SHOW CREATE TABLE `{t}`")).one()[1])
                       for t in tables]
                seeded = [t for t in tables if conn.execute(text(f"SELECT 1 FROM `{t}` LIMIT 1")).first()]
        finally:
            close_engine(engine)
        assert not any("%" in statement for statement in ddl), "a % in the DDL: the driver would read it"
        _mysql_template.update(name=make_url(url).database or "", url=url, ddl=ddl, seeded=seeded)
    return _mysql_template


def _copy_mysql_template(url: str) -> None:
    """Fill the new, empty database at ``url`` as the migrations would (from the template)."""
    template = _migrated_mysql_template()
    engine = create_engine({"url": url, "pool_size": 1})
    try:
        with engine.begin() as conn:
            for statement in template["ddl"]:
                conn.exec_driver_sql(statement)
            for table in template["seeded"]:
                conn.execute(text(f"INSERT INTO `{table}` SELECT * FROM {template['name']}.`{table}`"))
    finally:
        close_engine(engine)


@pytest.fixture(scope="session", autouse=True)
def _drop_pg_template() -> Iterator[None]:
    yield
    if "url" in _pg_template:
        drop_database("postgresql", _pg_template["url"])
    if "url" in _mysql_template:
        drop_database("mysql", _mysql_template["url"])


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    if kind != "sqlite":
        server(kind)
    return kind


@dataclass
class TestDatabase:
    kind: str
    url: str

    __test__ = False


def _database(kind: str, tmp_path: object, migrated: bool) -> Iterator[TestDatabase]:
    if kind == "sqlite":
        yield TestDatabase(kind, f"sqlite:///{tmp_path}/scheduler.db")
        return
    template = _migrated_pg_template() if migrated and kind == "postgresql" else None
    url = create_database(kind, template)
    try:
        if migrated and kind == "mysql":
            _copy_mysql_template(url)
        yield TestDatabase(kind, url)
    finally:
        drop_database(kind, url)


@pytest.fixture
def empty_database(backend: str, tmp_path: object) -> Iterator[TestDatabase]:
    """A clean database without the schema."""
    yield from _database(backend, tmp_path, migrated=False)


def _migrated_database(kind: str, tmp_path: object) -> Iterator[TestDatabase]:
    for db in _database(kind, tmp_path, migrated=True):
        if kind == "sqlite":  # the servers' databases are copies of a migrated template
            engine = create_engine(db.url)
            try:
                upgrade(engine)
            finally:
                close_engine(engine)
        yield db


@pytest.fixture
def database(backend: str, tmp_path: object) -> Iterator[TestDatabase]:
    """A clean database with the schema at head."""
    yield from _migrated_database(backend, tmp_path)


@pytest.fixture(params=("postgresql", "mysql"))
def server_database(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[TestDatabase]:
    """Like ``database``, for tests that need a database server (its own clock, row locks)."""
    server(request.param)
    yield from _migrated_database(request.param, tmp_path)


@pytest.fixture
def server_engine(server_database: TestDatabase) -> Iterator[Engine]:
    """An engine on ``server_database`` (PostgreSQL or MariaDB, a fresh migrated database)."""
    engine = create_engine(server_database.url)
    try:
        yield engine
    finally:
        close_engine(engine)


@pytest.fixture
def pg(tmp_path: object) -> Iterator[Engine]:
    """An engine on a migrated clean PostgreSQL database, for tests of PostgreSQL's own SQL."""
    server("postgresql")
    for database in _migrated_database("postgresql", tmp_path):
        eng = create_engine(database.url)
        try:
            yield eng
        finally:
            close_engine(eng)


@pytest.fixture
def engine(database: TestDatabase) -> Iterator[Engine]:
    """An engine on a migrated clean database; fails the test if a connection leaks."""
    eng = create_engine(database.url)
    try:
        yield eng
        leaked = eng.pool.checkedout()  # type: ignore[attr-defined]
        assert leaked == 0, f"test left {leaked} database connection(s) checked out"
    finally:
        close_engine(eng)


@pytest.fixture
def make_node(engine: Engine) -> Iterator[Any]:
    """Factory of initialised Schedulers on ``engine`` (fast ticks); all closed at teardown."""
    from scheduler_core import Scheduler, SchedulerConfig

    made: list[Scheduler] = []

    def make(hooks: Any = None, init: bool = True, **config: Any) -> Scheduler:
        config.setdefault("tick_interval_ms", 100)
        scheduler = Scheduler(engine, SchedulerConfig(**config), hooks=hooks)
        made.append(scheduler)
        if init:
            scheduler.init()
        return scheduler

    yield make
    for scheduler in made:
        scheduler.close()
