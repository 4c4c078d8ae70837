"""``kind: command`` handlers checked without running anything: every bad field named
(``handler.argv[2]``, ``handler.env.X``, ...), the program resolved once, the bounds, the minimal
environment, and the kind registered by default and refused by the dashboard."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from scheduler_core.errors import ConfigError
from scheduler_core.executors import ExecutorRegistry, default_executors
from scheduler_core.executors.command import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_TIMEOUT_MS,
    MAX_ARG_CHARS,
    MAX_ARGS,
    MAX_ARGV_CHARS,
    MAX_ENV,
    MAX_OUTPUT_BYTES,
    MAX_TIMEOUT_MS,
    CommandExecutor,
    child_environment,
)
from webapp.task_form import CODE_KINDS, CODE_REFUSED

COMMAND = CommandExecutor()
SH = shutil.which("sh") or "/bin/sh"


def _validate(**settings: Any) -> dict[str, Any]:
    return COMMAND.validate({"kind": "command", **settings})


def _refused(settings: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        COMMAND.validate({"kind": "command", **settings})
    return caught.value


def test_the_bounds_are_the_documented_ones() -> None:
    assert (DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS) == (30_000, 86_400_000)
    assert (DEFAULT_MAX_OUTPUT_BYTES, MAX_OUTPUT_BYTES) == (65_536, 1_048_576)
    assert (MAX_ARGS, MAX_ARG_CHARS, MAX_ARGV_CHARS, MAX_ENV) == (256, 4096, 65_536, 64)


def test_validate_fills_in_the_defaults() -> None:
    assert _validate(argv=["/usr/bin/pg_dump", "-f", "/backups/x.sql", "app"]) == {
        "kind": "command", "argv": ["/usr/bin/pg_dump", "-f", "/backups/x.sql", "app"], "env": {}, "cwd": "/",
        "timeout": 30_000, "max_output_bytes": 65_536}
    handler = _validate(argv=["/bin/x"], cwd="/srv", env={"PGUSER": "app"}, timeout=600_000, max_output_bytes=10)
    assert (handler["cwd"], handler["env"], handler["timeout"], handler["max_output_bytes"]) == (
        "/srv", {"PGUSER": "app"}, 600_000, 10)
    assert _validate(argv=["/bin/x", ""])["argv"] == ["/bin/x", ""]  # an empty argument is an argument


def test_an_absolute_program_is_taken_as_given_even_where_it_does_not_exist() -> None:
    # It may exist only on the nodes of the task's group: a missing program fails its run, not its registration.
    assert _validate(argv=["/opt/only-on-db-hosts/backup"])["argv"] == ["/opt/only-on-db-hosts/backup"]


def test_a_bare_name_is_resolved_on_path_once_at_validation(tmp_path: Path) -> None:
    assert _validate(argv=["sh", "-c", "true"])["argv"] == [SH, "-c", "true"]
    program = tmp_path / "backup"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    # The PATH the program will get: the handler's own, when it sets one.
    assert _validate(argv=["backup"], env={"PATH": f"relative/bin:{tmp_path}"})["argv"] == [str(program)]


@pytest.mark.parametrize(("argv", "message"), [
    (["./backup.sh"], "must be an absolute path"),
    (["bin/backup"], "must be an absolute path"),
    (["no-such-program-hai"], "is not found on PATH"),
    (["   "], "must be a non-empty string"),
])
def test_a_program_that_is_neither_absolute_nor_on_path_is_refused(argv: list[str], message: str) -> None:
    error = _refused({"argv": argv})
    assert error.field == "handler.argv[0]" and message in error.message


def test_a_program_found_only_through_a_relative_path_entry_is_refused(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bin").mkdir()
    program = tmp_path / "bin" / "backup"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    error = _refused({"argv": ["backup"], "env": {"PATH": "bin"}})
    assert error.field == "handler.argv[0]" and "is not found on PATH" in error.message


@pytest.mark.parametrize(("settings", "field"), [
    ({}, "handler.argv"),
    ({"argv": None}, "handler.argv"),
    ({"argv": "pg_dump -f x.sql app"}, "handler.argv"),
    ({"argv": []}, "handler.argv"),
    ({"argv": ["/bin/x", "-f", 3]}, "handler.argv[2]"),
    ({"argv": ["/bin/x", "a\x00b"]}, "handler.argv[1]"),
    ({"argv": ["/bin/\x00x"]}, "handler.argv[0]"),
    ({"argv": ["/bin/x", "\ud800"]}, "handler.argv[1]"),
    ({"argv": ["/bin/x"] * 257}, "handler.argv"),
    ({"argv": ["/bin/x", "a" * 4097]}, "handler.argv[1]"),
    ({"argv": ["/bin/x"] + ["a" * 4000] * 17}, "handler.argv"),
    ({"argv": ["/bin/x"], "env": ["A=1"]}, "handler.env"),
    ({"argv": ["/bin/x"], "env": {"1ST": "x"}}, "handler.env.1ST"),
    ({"argv": ["/bin/x"], "env": {"A=B": "x"}}, "handler.env.A=B"),
    ({"argv": ["/bin/x"], "env": {"": "x"}}, "handler.env."),
    ({"argv": ["/bin/x"], "env": {"PORT": 5432}}, "handler.env.PORT"),
    ({"argv": ["/bin/x"], "env": {"PGPASSWORD": "a\x00b"}}, "handler.env.PGPASSWORD"),
    ({"argv": ["/bin/x"], "env": {"BIG": "v" * 4097}}, "handler.env.BIG"),
    ({"argv": ["/bin/x"], "env": {f"V{n}": "x" for n in range(65)}}, "handler.env"),
    ({"argv": ["/bin/x"], "cwd": "srv"}, "handler.cwd"),
    ({"argv": ["/bin/x"], "cwd": ""}, "handler.cwd"),
    ({"argv": ["/bin/x"], "cwd": "/srv\x00"}, "handler.cwd"),
    ({"argv": ["/bin/x"], "cwd": 7}, "handler.cwd"),
    ({"argv": ["/bin/x"], "timeout": 0}, "handler.timeout"),
    ({"argv": ["/bin/x"], "timeout": 86_400_001}, "handler.timeout"),
    ({"argv": ["/bin/x"], "timeout": True}, "handler.timeout"),
    ({"argv": ["/bin/x"], "timeout": 1.5}, "handler.timeout"),
    ({"argv": ["/bin/x"], "max_output_bytes": 0}, "handler.max_output_bytes"),
    ({"argv": ["/bin/x"], "max_output_bytes": 1_048_577}, "handler.max_output_bytes"),
    ({"argv": ["/bin/x"], "shell": True}, "handler.shell"),
    ({"argv": ["/bin/x"], "command": "ls"}, "handler.command"),
    ({"argv": ["/bin/x"], "kind": "python"}, "handler.kind"),
])
def test_a_bad_field_is_named(settings: dict[str, Any], field: str) -> None:
    assert _refused(settings).field == field


def test_the_largest_handler_is_accepted() -> None:
    argv = ["/bin/x"] + ["a" * 4096] * 15 + ["b" * (65_536 - 6 - 15 * 4096)]
    assert sum(map(len, argv)) == MAX_ARGV_CHARS
    env = {f"V{n}": "v" * 4096 for n in range(64)}
    assert _validate(argv=argv, env=env, timeout=86_400_000, max_output_bytes=1_048_576)["argv"] == argv


def test_messages_never_quote_an_env_value() -> None:
    for value in ("hunter2\x00", "x" * 5000):
        error = _refused({"argv": ["/bin/x"], "env": {"PGPASSWORD": value}})
        assert "hunter2" not in error.message and "xxxxx" not in error.message


def test_a_string_argv_is_refused_saying_there_is_no_shell() -> None:
    assert "no shell" in _refused({"argv": "pg_dump app"}).message


def test_the_child_environment_is_path_lang_and_home_plus_the_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    node = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/var/lib/hai", "AWS_SECRET_ACCESS_KEY": "s",
            "HAI_DATABASE_URL": "postgresql://u:pw@db/app", "LD_PRELOAD": "/x.so", "PYTHONPATH": "/y"}
    assert child_environment({}, node) == {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/var/lib/hai"}
    assert child_environment({"LANG": "C", "PGUSER": "app"}, node) == {
        "PATH": "/usr/bin:/bin", "LANG": "C", "HOME": "/var/lib/hai", "PGUSER": "app"}
    assert child_environment({}, {}) == {"PATH": os.defpath}
    monkeypatch.setenv("HAI_TASK_SECRET", "s")
    assert "HAI_TASK_SECRET" not in child_environment({})  # the node's own environment by default


def test_command_is_a_default_kind_that_runs_on_posix_hosts() -> None:
    assert "command" in [executor.kind for executor in default_executors()]
    registry = ExecutorRegistry()
    assert "command" in registry.available_kinds()
    assert registry.validate({"kind": "command", "argv": ["/bin/x"]})["argv"] == ["/bin/x"]


def test_the_dashboard_refuses_it_as_it_refuses_code() -> None:
    assert "command" in CODE_KINDS
    assert "command" in CODE_REFUSED and "never accepts code" in CODE_REFUSED
