"""Every HAI_* setting is read and checked in one place (scheduler_core/settings.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from scheduler_core.db import DatabaseConfig
from scheduler_core.errors import ConfigError, DatabaseConfigError, ReachConfigError
from scheduler_core.settings import read_settings


def test_defaults_and_values_that_stay_what_they_are_written_as() -> None:
    settings = read_settings(environ={})
    assert (settings.bind, settings.workers, settings.threads, settings.environment) == (
        "127.0.0.1:8000", 2, 4, "development")
    digits = read_settings(environ={"HAI_ADMIN_PASSWORD": "12345678", "HAI_SECRET_KEY": "1" * 40,
                                    "HAI_NODE_GROUPS": "1,2", "HAI_COOKIE_SECURE": "yes"}).dashboard_config()
    assert digits["ADMIN_PASSWORD"] == "12345678" and digits["SECRET_KEY"] == "1" * 40
    assert digits["NODE_GROUPS"] == ("1", "2") and digits["COOKIE_SECURE"] is True
    assert read_settings(environ={"HAI_ENV": " Production ", "HAI_DATABASE_URL": "postgresql://h/db"}).cookie_secure


def test_a_flag_beats_its_variable_and_an_empty_variable_is_unset() -> None:
    flags = SimpleNamespace(bind="127.0.0.1:9000", workers=3, groups=["billing"], hooks="app.jobs:hooks",
                            database_url="sqlite:///flag.db")
    env = {"HAI_BIND": "127.0.0.1:8001", "HAI_WORKERS": "5", "HAI_NODE_GROUPS": "reports", "HAI_HOOKS": "x:y",
           "HAI_DATABASE_URL": "sqlite:///env.db"}
    settings = read_settings(flags, environ=env)
    assert (settings.bind, settings.workers, settings.groups, settings.hooks, settings.database.database) == (
        "127.0.0.1:9000", 3, ("billing",), "app.jobs:hooks", "flag.db")
    assert read_settings(environ={"HAI_WORKERS": "", "HAI_BIND": ""}).bind == "127.0.0.1:8000"


@pytest.mark.parametrize(("env", "field"), [
    ({"HAI_WORKERS": "abc"}, "HAI_WORKERS"),
    ({"HAI_WORKERS": "0"}, "HAI_WORKERS"),
    ({"HAI_THREADS": "0"}, "HAI_THREADS"),
    ({"HAI_BIND": ":8000"}, "HAI_BIND"),
    ({"HAI_BIND": "garbage"}, "HAI_BIND"),
    ({"HAI_BIND": "127.0.0.1:99999"}, "HAI_BIND"),
    ({"HAI_ADMIN_PASSWORD": "x"}, "HAI_ADMIN_PASSWORD"),
    ({"HAI_HOOKS": "no-colon"}, "HAI_HOOKS"),
    ({"HAI_NODE_GROUPS": "ok,tab\there"}, "HAI_NODE_GROUPS"),
    ({"HAI_COOKIE_SECURE": "maybe"}, "HAI_COOKIE_SECURE"),
    ({"HAI_ENV": "prod"}, "HAI_ENV"),
    ({"HAI_REACH_CONFIG": "/nonexistent/reach.json"}, "HAI_REACH_CONFIG"),
    ({"HAI_CONFIG_FILE": "/nonexistent/dashboard.json"}, "HAI_CONFIG_FILE"),
    ({"HAI_DATABASE_URL": "bogus"}, "HAI_DATABASE_URL"),
    ({"HAI_DATABASE_URL": "postgresql://h:0/db"}, "HAI_DATABASE_URL"),
    ({"HAI_DATABASE_POOL_SIZE": "many"}, "HAI_DATABASE_POOL_SIZE"),
    ({"HAI_DATABASE_TLS_VERIFY": "perhaps", "HAI_DATABASE_URL": "postgresql://h/db"}, "HAI_DATABASE_TLS_VERIFY"),
    ({"HAI_ENV": "production"}, "HAI_DATABASE_URL"),  # SQLite, the default, is refused in production
])
def test_a_bad_setting_is_refused_by_its_name(env: dict[str, str], field: str) -> None:
    with pytest.raises((ConfigError, ReachConfigError)) as info:
        read_settings(environ=env)
    assert info.value.field == field, info.value
    assert str(info.value).startswith(f"{info.value.code} {field}: ") and f"{field}: {field}" not in str(info.value)


def test_flags_are_named_as_typed() -> None:
    for flags, field in ((SimpleNamespace(bind=""), "--bind"), (SimpleNamespace(workers=0), "--workers"),
                         (SimpleNamespace(groups=["a\tb"]), "--group"),
                         (SimpleNamespace(database_url="nope"), "--database-url")):
        with pytest.raises(ConfigError) as info:
            read_settings(flags, environ={})
        assert info.value.field == field


def _file(tmp_path: Path, name: str, content: Any) -> str:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def test_the_config_file_holds_dashboard_settings_checked_like_the_variables(tmp_path: Path) -> None:
    good = _file(tmp_path, "good.json", {"ADMIN_PASSWORD": "from the file", "COOKIE_SECURE": True,
                                         "PERMANENT_SESSION_LIFETIME": 60})
    config = read_settings(environ={"HAI_CONFIG_FILE": good, "HAI_ADMIN_PASSWORD": "from the env"}).dashboard_config()
    assert config["ADMIN_PASSWORD"] == "from the file" and config["COOKIE_SECURE"] is True
    assert config["PERMANENT_SESSION_LIFETIME"] == 60
    for content, field in (("[1]", "HAI_CONFIG_FILE"), ("{", "HAI_CONFIG_FILE"),
                           ({"ADMIN_PASSWORD": 12345678}, "HAI_CONFIG_FILE.ADMIN_PASSWORD"),
                           ({"COOKIE_SECURE": "sometimes"}, "HAI_CONFIG_FILE.COOKIE_SECURE"),
                           ({"DATABASE_URL": "sqlite:///elsewhere.db"}, "HAI_CONFIG_FILE.DATABASE_URL"),
                           ({"REACH": {"providers": [{"name": "m", "type": "smtp"}]}}, "HAI_CONFIG_FILE.REACH")):
        with pytest.raises((ConfigError, ReachConfigError)) as info:
            read_settings(environ={"HAI_CONFIG_FILE": _file(tmp_path, "bad.json", content)})
        assert info.value.field == field, info.value


def test_the_notification_file_is_checked_as_reach_checks_it(tmp_path: Path) -> None:
    console = {"providers": [{"name": "log", "type": "console"}]}
    assert read_settings(environ={"HAI_REACH_CONFIG": _file(tmp_path, "ok.json", console)}).reach_config
    for content in ({"providers": [{"name": "m", "type": "smtp"}]}, {"nonsense": 1}, "not json",
                    {"providers": [], "templates": [{"name": "t", "provider": "none", "body": "x"}]}):
        with pytest.raises(ReachConfigError) as info:
            read_settings(environ={"HAI_REACH_CONFIG": _file(tmp_path, "reach.json", content)})
        assert info.value.field == "HAI_REACH_CONFIG", info.value
    with pytest.raises(ReachConfigError):  # the console provider is refused in production, here too
        read_settings(environ={"HAI_REACH_CONFIG": _file(tmp_path, "ok.json", console), "HAI_ENV": "production",
                               "HAI_DATABASE_URL": "postgresql://h/db"})


def test_a_relative_sqlite_path_is_taken_from_the_current_directory(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = DatabaseConfig.from_url("sqlite:///data/scheduler.db")
    assert config.database == "data/scheduler.db"  # as written
    assert config.sqlite_path() == os.path.join(tmp_path, "data", "scheduler.db")
    assert config.sqlalchemy_url().database == config.sqlite_path()
    assert DatabaseConfig.from_url(f"sqlite:///{tmp_path}/abs.db").sqlite_path() == f"{tmp_path}/abs.db"


def test_database_errors_name_the_variable_without_repeating_it() -> None:
    with pytest.raises(DatabaseConfigError) as info:
        read_settings(environ={"HAI_DATABASE_POOL_SIZE": "0"})
    assert str(info.value) == "hai:reldb:012 HAI_DATABASE_POOL_SIZE: must be an integer between 1 and 1000 (got 0)"


def test_the_public_url_is_an_http_address() -> None:
    from scheduler_core.errors import ConfigError
    from scheduler_core.settings import read_settings

    base = {"HAI_DATABASE_URL": "sqlite:///x.db"}
    assert read_settings(environ={**base, "HAI_PUBLIC_URL": "https://scheduler.example"}).public_url == (
        "https://scheduler.example")
    assert read_settings(environ=base).dashboard_config()["PUBLIC_URL"] is None
    try:
        read_settings(environ={**base, "HAI_PUBLIC_URL": "scheduler.example"})
    except ConfigError as exc:
        assert exc.field == "HAI_PUBLIC_URL"
    else:
        raise AssertionError("a public URL without a scheme was accepted")


@pytest.mark.parametrize("value", ["x", "-1", "17", "1.5", "²", "٣"])
def test_trusted_proxies_is_a_small_count_checked_with_the_others(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        read_settings(environ={"HAI_DATABASE_URL": "sqlite:///x.db", "HAI_TRUSTED_PROXIES": value})
    assert info.value.field == "HAI_TRUSTED_PROXIES"


def test_trusted_proxies_reaches_the_dashboard_config() -> None:
    base = {"HAI_DATABASE_URL": "sqlite:///x.db"}
    assert read_settings(environ=base).dashboard_config()["TRUSTED_PROXIES"] == 0
    assert read_settings(environ={**base, "HAI_TRUSTED_PROXIES": "2"}).dashboard_config()["TRUSTED_PROXIES"] == 2


@pytest.mark.parametrize("name", ["HAI_WORKERS", "HAI_THREADS"])
def test_a_count_in_other_digits_is_refused_by_name_not_a_traceback(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        read_settings(environ={"HAI_DATABASE_URL": "sqlite:///x.db", name: "²"})
    assert info.value.field == name


@pytest.mark.parametrize("value", ["0", "-5", "1000001", "x", "²", "٣", "1.5"])
def test_the_api_rate_limit_is_a_count_checked_by_name(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        read_settings(environ={"HAI_DATABASE_URL": "sqlite:///x.db", "HAI_API_RATE_LIMIT": value})
    assert info.value.field == "HAI_API_RATE_LIMIT"


def test_the_api_rate_limit_reaches_the_dashboard_config() -> None:
    base = {"HAI_DATABASE_URL": "sqlite:///x.db"}
    assert read_settings(environ=base).dashboard_config()["API_RATE_LIMIT"] == 600
    assert read_settings(environ={**base, "HAI_API_RATE_LIMIT": "30"}).dashboard_config()["API_RATE_LIMIT"] == 30


def test_a_misspelt_setting_is_named_with_the_one_it_resembles(tmp_path: Path) -> None:
    from scheduler_core.settings import likely_typos

    typos = likely_typos({"HAI_DATABSE_URL": "postgresql://h/db", "hai_workers": "3", "HAI_ADMIN_PASS": "x",
                          "HAI_NODE_GROUP": "billing", "HAI_THREADS ": "8", "HAI_BIND\t": "x"})
    assert typos == ["HAI_ADMIN_PASS is not a setting and is ignored: did you mean HAI_ADMIN_PASSWORD?",
                     "'HAI_BIND\\t' is not a setting and is ignored: did you mean HAI_BIND?",
                     "HAI_DATABSE_URL is not a setting and is ignored: did you mean HAI_DATABASE_URL?",
                     "HAI_NODE_GROUP is not a setting and is ignored: did you mean HAI_NODE_GROUPS?",
                     "'HAI_THREADS ' is not a setting and is ignored: did you mean HAI_THREADS?",
                     "hai_workers is not a setting and is ignored: did you mean HAI_WORKERS?"]
    assert likely_typos({"HAI_" + "X" * 100_000: "huge"}) == []  # nothing like a setting, and quick
    # the settings themselves, the application's own HAI_ variables and the test suite's are not typos
    theirs = {"HAI_TASK_NIGHTLY_HANDLER_HEADERS_AUTHORIZATION": "x", "HAI_TEST_REQUIRE": "mysql",
              "HAI_TEST_WORKERS": "2", "HAI_TOKEN": "t", "HAI_SMS_TOKEN": "s", "HAI_SMTP_PASSWORD": "p",
              "PATH": "/bin"}
    assert likely_typos({**theirs, **{name: "1" for name in _readme_variables()}}) == []
    file = {"ADMIN_PASWORD": "long enough", "REACH_CONFG": "x", "WORKER": 3, "PERMANENT_SESSION_LIFETIME": 60,
            "REACH": {}}
    assert likely_typos({}, file) == [
        "HAI_CONFIG_FILE.ADMIN_PASWORD is not a setting and is ignored: did you mean ADMIN_PASSWORD?",
        "HAI_CONFIG_FILE.REACH_CONFG is not a setting and is ignored: did you mean REACH_CONFIG?",
        "HAI_CONFIG_FILE.WORKER is not a setting and is ignored: did you mean HAI_WORKERS "
        "(read from the environment only)?"]


def _readme_variables() -> set[str]:
    """Every HAI_ variable the README's configuration table names (the list likely_typos knows must
    hold them all, or setting one would be called a typo of another)."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("| `HAI_"))
    names = set(re.findall(r"`(HAI_[A-Z0-9_]+)`", table))
    for row in re.findall(r"`(HAI_[A-Z0-9_]+)`((?:, `_[A-Z]+`)+)", table):  # HAI_X_CA, `_CERT` ... shorthand
        stem = row[0].rsplit("_", 1)[0]
        names |= {stem + suffix for suffix in re.findall(r"`(_[A-Z]+)`", row[1])}
    assert len(names) > 20, names
    return names


def test_every_variable_the_readme_names_is_known() -> None:
    from scheduler_core.settings import VARIABLES

    assert _readme_variables() - VARIABLES == set()
