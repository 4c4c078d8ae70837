"""Hostile task files (issue #30, "Tasks as code"): a file is untrusted input. An alias bomb, a
deep nest, a recursive alias or a key written twice is refused with one line naming the bound (or
the key) and the line, quickly, and changes nothing in the database; every unknown key of an entry
is named at once; the two documented shapes are accepted and any other is refused naming them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.engine import Engine
from yaml.scanner import ScannerError

from scheduler_core.db import close_engine, create_engine
from scheduler_core.errors import ConfigError
from scheduler_core.runtime import bounded_load
from scheduler_core.runtime.bounded_load import MAX_FILE_BYTES
from scheduler_core.runtime.task_files import read_task_file
from scheduler_core.store import TaskRepository
from tests.conftest import TestDatabase
from webapp.cli import main

GOOD = "tasks:\n  - {id: nightly, name: Nightly, cron: '0 2 * * *'}\n  - {id: cleanup, name: Cleanup, cron: '@daily'}\n"
LAUGHS = """\
    a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
    f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
    g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
    h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
    i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""  # 9**9 (387 million) "lol" in 500 bytes
BOMB_IN_PARAMS = "tasks:\n  - id: a\n    name: A\n    cron: '0 2 * * *'\n    params:\n" + textwrap.indent(LAUGHS, "  ")
BOMB_AT_TOP = textwrap.dedent(LAUGHS) + "tasks: []\n"
DEEP_BLOCK = "tasks:\n  - id: a\n    name: A\n    cron: '0 2 * * *'\n    params:\n" + "".join(
    " " * (6 + 2 * level) + f"k{level}:\n" for level in range(60)) + " " * 126 + "leaf: 1\n"
DEEP_FLOW = "tasks:\n  - id: a\n    name: A\n    cron: '0 2 * * *'\n    params: {a: " + "[" * 5000 + "]" * 5000 + "}\n"
DEEP_JSON = ('{"tasks": [{"id": "a", "name": "A", "cron": "0 2 * * *", "params": {"a": '
             + "[" * 5_000_000 + "]" * 5_000_000 + "}}]}")  # 10 MB, under the cap
HOSTILE = [
    ("bomb-in-params", "t.yaml", BOMB_IN_PARAMS, "FILE",
     "holds more than 2,621,440 values through the alias *f (line 12)"),
    ("bomb-at-top", "t.yaml", BOMB_AT_TOP, "FILE", "holds more than 2,621,440 values through the alias *f (line 7)"),
    ("recursive-alias", "t.yaml", "tasks:\n  - {id: a, name: A, cron: '@daily', params: &p {self: *p}}\n", "FILE",
     "has an alias *p inside the value it repeats (a recursive value) (line 2)"),
    ("deep-yaml-block", "t.yaml", DEEP_BLOCK, "FILE", "is nested more than 40 levels deep (line 42)"),
    ("deep-yaml-flow", "t.yaml", DEEP_FLOW, "FILE", "is nested more than 40 levels deep (line 5)"),
    ("deep-json", "t.json", DEEP_JSON, "FILE", "is nested more than 40 levels deep (line 1)"),
    ("repeated-key-in-entry", "t.yaml", "tasks:\n  - id: a\n    name: A\n    name: B\n    cron: '@daily'\n",
     "FILE", "repeats the key 'name' in one mapping (lines 3 and 4)"),
    ("repeated-key-in-params", "t.yaml",
     "tasks:\n  - id: a\n    name: A\n    cron: '@daily'\n    params:\n      table: x\n      table: y\n",
     "FILE", "repeats the key 'table' in one mapping (lines 6 and 7)"),
    ("repeated-top-key", "t.yaml", "tasks: []\ntasks:\n  - {id: a, name: A, cron: '@daily'}\n",
     "FILE", "repeats the key 'tasks' in one mapping (lines 1 and 2)"),
    ("repeated-key-json", "t.json", '{"tasks": [{"id": "a", "name": "A", "name": "B", "cron": "@daily"}]}',
     "FILE", "repeats the key 'name' in one object"),
    ("three-unknown-keys", "t.yaml",
     "tasks:\n  - id: a\n    name: A\n    cron: '@daily'\n    colour: red\n    size: 3\n    flavour: x\n",
     "tasks.a", "colour (line 5), size (line 6), flavour (line 7) are not task fields (the fields: id, name, "),
    ("three-unknown-keys-json", "t.json",
     '{"tasks": [{"id": "a", "name": "A", "cron": "@daily", "colour": 1, "size": 2, "flavour": 3}]}',
     "tasks.a", "colour, size, flavour are not task fields (the fields: id, name, "),
    ("a-string", "t.yaml", "just a string\n", "FILE",
     'must hold a mapping with "tasks: [...]" or a list of tasks (got str)'),
    ("an-empty-file", "t.yaml", "# nothing yet\n", "FILE",
     'must hold a mapping with "tasks: [...]" or a list of tasks (got nothing)'),
]


@pytest.fixture
def engine(database: TestDatabase) -> Iterator[Engine]:
    made = create_engine(database.url)
    yield made
    close_engine(made)


def _apply(url: str, capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["tasks", "apply", *words, "--database-url", url])
    out, err = capsys.readouterr()
    return code, out, err


def _stored(engine: Engine) -> dict[str, tuple[int, int | None]]:
    """Each task's (revision, updated_at): what any write would move."""
    return {task.id: (task.revision, task.updated_at) for task in TaskRepository(engine).load_all()[1]}


@pytest.mark.timeout(60)  # before the bounds, the bomb never returned
@pytest.mark.parametrize(("case", "name", "text", "field", "message"), HOSTILE, ids=[case[0] for case in HOSTILE])
def test_a_hostile_file_is_refused_whole_and_changes_nothing(
        database: TestDatabase, engine: Engine, capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str,
        name: str, text: str, field: str, message: str) -> None:
    good = tmp_path / "tasks.yaml"
    good.write_text(GOOD, encoding="utf-8")
    assert _apply(database.url, capsys, str(good))[0] == 0
    before = _stored(engine)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    started = time.perf_counter()
    code, out, err = _apply(database.url, capsys, str(path), "--prune", "--source", "tasks")
    with capsys.disabled():
        print(f"\n  {case} ({len(text):,} bytes) refused in {time.perf_counter() - started:.3f} s:"
                  f" {err.strip().replace(str(path), name)[:150]}")
    assert (code, out) == (1, "")
    assert len(err.splitlines()) == 1 and err.startswith(f"error: hai:scheduler:012 {field}: "), err
    assert message in err, err
    assert _stored(engine) == before  # with --prune, an applied file would have deleted both tasks


def test_the_bomb_is_refused_by_the_command_as_a_process(tmp_path: Path) -> None:
    """The real command on the bomb, with and without --dry-run: it ends with the named error, no hang."""
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB_IN_PARAMS, encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "HAI_DATABASE_URL": f"sqlite:///{tmp_path}/p.db"}
    for dry_run in ([], ["--dry-run"]):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "webapp.cli", "tasks", "apply", str(path), *dry_run], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=20)
        print(f"tasks apply {' '.join(dry_run)} on the bomb: exit {done.returncode} after "
              f"{time.perf_counter() - started:.2f} s (the process, imports included)")
        assert (done.returncode, done.stdout) == (1, "")
        assert done.stderr == (f"error: hai:scheduler:012 FILE: {path} holds more than 2,621,440 values through the "
                               "alias *f (line 12)\n")
    started = time.perf_counter()
    with pytest.raises(ConfigError):
        read_task_file(str(path), {})
    print(f"read_task_file refused the bomb in {(time.perf_counter() - started) * 1000:.1f} ms")


@pytest.mark.parametrize("loader", [bounded_load.PyLoader, bounded_load.CLoader], ids=["pyyaml", "libyaml"])
@pytest.mark.parametrize(("name", "text", "message"),
                         [(case[0], case[2], case[4]) for case in HOSTILE if case[3] == "FILE" and case[1] == "t.yaml"
                          and "must hold" not in case[4]])
def test_both_parsers_keep_the_bounds(loader: Any, name: str, text: str, message: str) -> None:
    """The loader on libyaml (used where PyYAML has it) and on PyYAML's own parser refuse alike."""
    reader = loader(text, "t.yaml")
    with pytest.raises((ConfigError, ScannerError)) as refused:
        reader.get_single_data()
    if isinstance(refused.value, ConfigError):
        assert message in refused.value.message
    else:  # libyaml stops a flow nest at 1,000 levels before the composer sees it; load_yaml names the bound
        assert name == "deep-yaml-flow" and loader is bounded_load.CLoader
        with pytest.raises(ConfigError, match="is nested more than 40 levels deep"):
            bounded_load.load_yaml(text, "t.yaml")


def test_merged_keys_may_be_overridden_and_aliases_within_the_bounds_load(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(textwrap.dedent("""\
        tasks:
          - &one {id: one, name: Shared, cron: '0 2 * * *', params: &params {region: eu, tables: [a, b]}}
          - {<<: *one, id: two, name: Own name}
          - {id: three, name: Three, cron: '@daily', params: {<<: *params, region: us}}
    """), encoding="utf-8")
    tasks = read_task_file(str(path), {}).tasks
    assert [(task.id, task.name) for task in tasks] == [("one", "Shared"), ("two", "Own name"), ("three", "Three")]
    assert tasks[1].params == {"region": "eu", "tables": ["a", "b"]}
    assert tasks[2].params == {"region": "us", "tables": ["a", "b"]}


def test_a_bare_list_of_tasks_is_applied(database: TestDatabase, engine: Engine,
                                         capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The README's two shapes: "tasks: [...]" and the list alone (here in JSON and YAML)."""
    listed = tmp_path / "listed.json"
    listed.write_text('[{"id": "a", "name": "A", "cron": "0 2 * * *"}]', encoding="utf-8")
    code, out, _ = _apply(database.url, capsys, str(listed))
    assert code == 0 and "create     a" in out
    listed_yaml = tmp_path / "listed.yaml"
    listed_yaml.write_text("- {id: b, name: B, cron: '@daily'}\n", encoding="utf-8")
    assert _apply(database.url, capsys, str(listed_yaml))[0] == 0
    assert set(_stored(engine)) == {"a", "b"}


def test_a_large_legitimate_file_loads_and_one_past_the_cap_is_refused(tmp_path: Path) -> None:
    """Files just under MAX_FILE_BYTES of ordinary tasks (large params) load, YAML and JSON; the cap
    counts bytes, so a file of fewer characters but more bytes than the cap is refused by it."""
    chunks = [f"{'x' * 990}{line:05d}" for line in range(60)]
    tasks = [{"id": f"t{index}", "name": f"Task {index}", "cron": "0 2 * * *", "params": {"chunks": list(chunks)}}
             for index in range(MAX_FILE_BYTES // len(json.dumps(chunks)))]  # lists apart: no YAML anchors
    for name, dump in (("large.yaml", yaml.safe_dump), ("large.json", json.dumps)):
        text = dump({"tasks": tasks})
        while len(text.encode()) > MAX_FILE_BYTES:
            tasks.pop()
            text = dump({"tasks": tasks})
        assert len(text.encode()) > MAX_FILE_BYTES - 70_000
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        started = time.perf_counter()
        assert [task.id for task in read_task_file(str(path), {}).tasks] == [task["id"] for task in tasks]
        print(f"{name}: {len(text):,} bytes read and validated in {time.perf_counter() - started:.2f} s")
    wide = "é" * (MAX_FILE_BYTES // 2 + 1)  # fewer characters than the cap, more bytes
    path = tmp_path / "wide.yaml"
    path.write_text(f"tasks: []\n# {wide}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"FILE: {path} is larger than {MAX_FILE_BYTES} bytes"):
        read_task_file(str(path), {})
