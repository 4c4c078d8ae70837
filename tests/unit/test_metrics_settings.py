"""HAI_METRICS_TOKEN and HAI_METRICS_ALLOW: checked where every setting is, errors naming the
variable (or the HAI_CONFIG_FILE key); ``serve`` refuses a bad one before it starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler_core.errors import ConfigError
from scheduler_core.settings import METRICS_LOOPBACK, read_settings


def test_defaults_allow_loopback_and_need_no_token() -> None:
    settings = read_settings(environ={})
    assert settings.metrics_allow == METRICS_LOOPBACK and settings.metrics_token is None
    assert "metrics_token" not in repr(settings)  # a secret: never in a repr


def test_networks_and_token_are_read() -> None:
    settings = read_settings(environ={"HAI_METRICS_ALLOW": " 10.0.0.0/8 , 2001:db8::/32, 192.0.2.7 ",
                                      "HAI_METRICS_TOKEN": "a" * 16})
    assert settings.metrics_allow == ("10.0.0.0/8", "2001:db8::/32", "192.0.2.7/32")
    assert settings.metrics_token == "a" * 16
    assert read_settings(environ={"HAI_METRICS_ALLOW": "none"}).metrics_allow == ()


@pytest.mark.parametrize(("environ", "field", "words"), [
    ({"HAI_METRICS_ALLOW": "10.0.0.0/8,,::1"}, "HAI_METRICS_ALLOW", "''"),
    ({"HAI_METRICS_ALLOW": "300.1.1.1"}, "HAI_METRICS_ALLOW", "'300.1.1.1' is not an address or CIDR"),
    ({"HAI_METRICS_ALLOW": "none,10.0.0.0/8"}, "HAI_METRICS_ALLOW", "'none'"),
    ({"HAI_METRICS_ALLOW": ",".join(["10.0.0.1"] * 65)}, "HAI_METRICS_ALLOW", "at most 64"),
    ({"HAI_METRICS_TOKEN": "x" * 15}, "HAI_METRICS_TOKEN", "at least 16 characters"),
    ({"HAI_METRICS_TOKEN": "abc\tdefghijklmnopq"}, "HAI_METRICS_TOKEN", "without spaces"),
])
def test_a_bad_value_names_the_variable(environ: dict[str, str], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        read_settings(environ=environ)
    assert raised.value.field == field and words in raised.value.message


def test_a_bad_value_in_the_config_file_names_its_key(tmp_path: Path) -> None:
    path = tmp_path / "dash.json"
    path.write_text(json.dumps({"METRICS_ALLOW": ["10.0.0.0/8", "nonsense"]}), encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        read_settings(environ={"HAI_CONFIG_FILE": str(path)})
    assert raised.value.field == "HAI_CONFIG_FILE.METRICS_ALLOW"


def test_serve_refuses_a_bad_allow_list_before_it_starts(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HAI_DATABASE_URL": f"sqlite:///{tmp_path}/s.db",
           "HAI_METRICS_ALLOW": "10.0.0.0/40"}
    done = subprocess.run([sys.executable, "-m", "webapp.cli", "serve", "--bind", "127.0.0.1:1"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: hai:scheduler:012 HAI_METRICS_ALLOW: '10.0.0.0/40' is not an address")
    assert len(done.stderr.splitlines()) == 1 and not (tmp_path / "s.db").exists()
