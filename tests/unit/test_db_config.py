"""Database configuration: every bad value names its field; snapshots hide secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler_core.db import DatabaseConfig, TlsConfig, create_engine
from scheduler_core.db.config import check_production_guard
from scheduler_core.errors import DatabaseConfigError


def test_url_forms() -> None:
    pg = DatabaseConfig.from_url("postgresql://app:s3cret@db.example:6543/sched")
    assert (pg.type, pg.host, pg.port, pg.user, pg.password, pg.database) == (
        "postgresql", "db.example", 6543, "app", "s3cret", "sched")
    assert DatabaseConfig.from_url("postgres://h/db").type == "postgresql"
    assert DatabaseConfig.from_url("postgresql+psycopg://h/db").type == "postgresql"
    assert DatabaseConfig.from_url("mariadb://root@h/db").type == "mysql"
    assert DatabaseConfig.from_url("mysql+pymysql://root@h/db").type == "mysql"
    lite = DatabaseConfig.from_url("sqlite:///var/scheduler.db")
    assert (lite.type, lite.database) == ("sqlite", "var/scheduler.db")


def test_url_password_with_special_characters_is_decoded_and_masked() -> None:
    config = DatabaseConfig.from_url("postgresql://app:p%40ss%2Fw@h/db")
    assert config.password == "p@ss/w"
    snapshot = config.redacted()
    assert snapshot["password"] == "***"
    assert "p@ss" not in repr(snapshot) and "p%40ss" not in repr(snapshot)
    assert "***" in snapshot["url"]


def test_redacted_masks_tls_key_but_keeps_shape() -> None:
    config = DatabaseConfig(type="mysql", database="d", host="h", password="pw",
                            tls=TlsConfig(ca="/ca.pem", cert="/c.pem", key="/secret/key.pem"))
    snapshot = config.redacted()
    assert snapshot["tls"] == {"ca": "/ca.pem", "cert": "/c.pem", "key": "***", "verify": True}
    assert "secret" not in repr(snapshot) and "pw" not in snapshot["url"]
    assert "pw" not in repr(config)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"type": "oracle", "database": "x"}, "type"),
        ({"url": "oracle://h/db"}, "url"),
        ({"url": "postgresql+asyncpg://h/db"}, "url"),
        ({"url": "postgresql://h/db?sslmode=require"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"url": ""}, "url"),
        ({"url": "postgresql://h:0/db"}, "port"),
        ({"type": "postgresql", "database": "d", "port": 0}, "port"),
        ({"type": "postgresql", "database": "d", "port": 70000}, "port"),
        ({"type": "postgresql", "database": "d", "port": "5432"}, "port"),
        ({"type": "postgresql", "database": "d", "pool_size": -1}, "pool_size"),
        ({"type": "postgresql", "database": "d", "pool_size": 0}, "pool_size"),
        ({"type": "postgresql", "database": "d", "pool_size": True}, "pool_size"),
        ({"type": "postgresql", "database": "d", "acquire_timeout_ms": 0}, "acquire_timeout_ms"),
        ({"type": "postgresql", "database": "d", "acquire_timeout_ms": 2**31}, "acquire_timeout_ms"),
        ({"type": "postgresql", "database": ""}, "database"),
        ({"url": "postgresql://h"}, "database"),
        ({"type": "postgresql"}, "database"),
        ({"database": "d"}, "type"),
        ({"type": "postgresql", "database": "d", "host": " "}, "host"),
        ({"type": "sqlite", "database": ":memory:"}, "database"),
        ({"url": "sqlite://"}, "database"),
        ({"type": "sqlite", "database": "x.db", "host": "h"}, "host"),
        ({"type": "mysql", "database": "d", "tls": {"cert": "/c.pem"}}, "tls.key"),
        ({"type": "mysql", "database": "d", "tls": {"key": "/k.pem"}}, "tls.cert"),
        ({"type": "mysql", "database": "d", "tls": {"verify": "maybe"}}, "tls.verify"),
        ({"type": "mysql", "database": "d", "tls": {"pem": "x"}}, "tls.pem"),
        ({"type": "mysql", "database": "d", "poolsize": 3}, "poolsize"),
        # a cluster's host list (libpq multi-host), issue #31
        ({"url": "postgresql://u@h1:5432,h2:99999/db"}, "hosts[1].port"),
        ({"url": "postgresql://u@h1:x,h2/db"}, "hosts[0].port"),
        ({"url": "postgresql://u@h1:,h2/db"}, "hosts[0].port"),
        ({"url": "postgresql://u@h1,,h2/db"}, "hosts[1]"),
        ({"url": "postgresql://u@h1,h2,/db"}, "hosts[2]"),
        ({"url": "postgresql://u@::1,h2/db"}, "hosts[0]"),
        ({"url": "postgresql://u@[::1,h2/db"}, "hosts[0]"),
        ({"url": "postgresql://u@h1,postgresql://h2/db"}, "hosts[1].port"),
        ({"url": "mysql://root@h1,h2/db"}, "hosts"),
        ({"url": "sqlite://h1,h2/x.db"}, "hosts"),
        ({"url": "sqlite:///x.db?target_session_attrs=read-write"}, "target_session_attrs"),
        ({"url": "mysql://root@h/db?target_session_attrs=read-write"}, "target_session_attrs"),
        ({"url": "postgresql://u@h1,h2/db?target_session_attrs=standby"}, "target_session_attrs"),
        ({"url": "postgresql://u@h1,h2/db?target_session_attrs=prefer-standby"}, "target_session_attrs"),
        ({"url": "postgresql://u@h1,h2/db?target_session_attrs=any"}, "target_session_attrs"),
        ({"url": "postgresql://u@h1,h2/db?target_session_attrs=readwrite"}, "target_session_attrs"),
        ({"url": "postgresql://u@h1,h2/db?target_session_attrs=read-write&target_session_attrs=primary"},
         "target_session_attrs"),
        ({"url": "postgresql://u@h1,h2/db?connect_timeout=1"}, "url"),
        ({"type": "postgresql", "database": "d", "host": "h", "hosts": ["a:1", "b:2"]}, "hosts"),
        ({"type": "postgresql", "database": "d", "hosts": []}, "hosts"),
        ({"type": "postgresql", "database": "d", "hosts": [("a", 0)]}, "hosts[0].port"),
        ({"type": "postgresql", "database": "d", "hosts": [("a b", 5432)]}, "hosts[0].host"),
        ({"type": "postgresql", "database": "d", "hosts": [("a", 1, 2)]}, "hosts[0]"),
        ({"type": "postgresql", "database": "d", "hosts": [f"h{i}:1" for i in range(17)]}, "hosts"),
    ],
)
def test_invalid_values_name_the_field(values: dict[str, object], field: str) -> None:
    with pytest.raises(DatabaseConfigError) as info:
        DatabaseConfig.from_mapping(values)
    assert info.value.field == field
    assert info.value.code == "hai:reldb:012"
    assert str(info.value).startswith(f"hai:reldb:012 {field}:")


def test_bad_port_message_shows_value_but_never_the_password() -> None:
    with pytest.raises(DatabaseConfigError) as info:
        DatabaseConfig(type="postgresql", database="d", port=0, password="hunter2")
    assert "port" in str(info.value) and "0" in str(info.value)
    with pytest.raises(DatabaseConfigError) as info:
        DatabaseConfig(type="postgresql", database="d", password=42)  # type: ignore[arg-type]
    assert "42" not in str(info.value)


def test_from_env_reads_url_and_numbers() -> None:
    config = DatabaseConfig.from_env({
        "HAI_DATABASE_URL": "mysql://root@127.0.0.1:3306/test",
        "HAI_DATABASE_POOL_SIZE": "4",
        "HAI_DATABASE_TLS_CA": "/etc/ssl/ca.pem",
        "HAI_DATABASE_TLS_VERIFY": "false",
    })
    assert (config.type, config.pool_size, config.tls) == ("mysql", 4, TlsConfig(ca="/etc/ssl/ca.pem", verify=False))
    assert DatabaseConfig.from_env({}).database == "scheduler.db"
    with pytest.raises(DatabaseConfigError) as info:
        DatabaseConfig.from_env({"HAI_DATABASE_POOL_SIZE": "many"})
    assert info.value.field == "pool_size"


def test_production_refuses_sqlite_unless_e2e() -> None:
    config = DatabaseConfig.from_url("sqlite:///x.db")
    with pytest.raises(DatabaseConfigError) as info:
        check_production_guard(config, {"HAI_ENV": "production"})
    assert info.value.field == "type" and "SQLite" in str(info.value)
    check_production_guard(config, {"HAI_ENV": "production", "HAI_E2E": "1"})
    check_production_guard(DatabaseConfig.from_url("postgresql://h/db"), {"HAI_ENV": "production"})
    with pytest.raises(DatabaseConfigError):
        DatabaseConfig.from_env({"HAI_ENV": "production"})


def test_create_engine_in_production_creates_no_file(tmp_path: Path) -> None:
    target = tmp_path / "prod.db"
    with pytest.raises(DatabaseConfigError):
        create_engine(f"sqlite:///{target}", environ={"HAI_ENV": "production"})
    assert not target.exists()


def test_invalid_config_creates_nothing(tmp_path: Path) -> None:
    target = tmp_path / "bad.db"
    with pytest.raises(DatabaseConfigError):
        create_engine({"url": f"sqlite:///{target}", "pool_size": -1})
    assert not target.exists()


def test_a_cluster_url_keeps_every_host_in_order_and_lands_on_the_primary() -> None:
    config = DatabaseConfig.from_url("postgresql://u:s3cret@db-a:5432,db-b,[fd00::7]:6432/jobs")
    assert config.hosts == (("db-a", 5432), ("db-b", 5432), ("fd00::7", 6432))
    assert config.target_session_attrs == "read-write"  # several hosts: the writable one, always
    snapshot = config.redacted()
    assert snapshot["hosts"] == ["db-a:5432", "db-b:5432", "[fd00::7]:6432"]
    assert snapshot["url"] == ("postgresql+psycopg://u:***@db-a:5432,db-b:5432,[fd00::7]:6432/jobs"
                               "?target_session_attrs=read-write")
    assert "s3cret" not in repr(snapshot)
    url = config.sqlalchemy_url()
    assert url.query["host"] == ("db-a:5432", "db-b:5432", "[fd00::7]:6432")
    assert DatabaseConfig.from_url("postgresql://u@h/db?target_session_attrs=primary").target_session_attrs == \
        "primary"
    assert DatabaseConfig.from_url("postgresql://u@h/db").target_session_attrs is None  # one host: as before
    assert DatabaseConfig.from_mapping({"type": "postgresql", "database": "d", "hosts": ["a:1", ("b", 2)]}).hosts \
        == (("a", 1), ("b", 2))
