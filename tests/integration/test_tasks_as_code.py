"""Tasks as code: ``hai-scheduler tasks apply / export / list / trigger`` through the command
line's entry function on each database (and once as a real process): the diff, one compare-and-set
per task, a second apply that changes nothing, prune limited to the file's own tasks, bad files
refused whole with one line, and exports that never hold a secret."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, TaskDefinition
from scheduler_core.db import close_engine, create_engine
from scheduler_core.errors import ConflictError
from scheduler_core.runtime.task_apply import Change, apply_step, plan
from scheduler_core.runtime.task_files import FILE_FIELDS, read_task_file
from scheduler_core.store import TaskRepository
from scheduler_core.store.nodes import NodeRepository
from scheduler_core.store.task_files import TaskFileRepository
from tests.conftest import TestDatabase
from tests.helpers.fault_cluster import wait_for
from tests.helpers.journal import wait_for_status
from webapp.cli import main

SECRET = "Bearer reports-secret-7f3a9c"
PASSWORD = "db-password-51c2"
FILE = """\
tasks:
  - id: nightly
    name: Nightly report
    cron: "0 2 * * *"
    timezone: Europe/Berlin
    handler:
      kind: api
      url: https://reports.example/run
      headers:
        Authorization: "${REPORTS_AUTH}"
        X-Team: ops
  - id: cleanup
    name: Cleanup
    cron: "*/5 * * * *"
    idempotent: true
    retry: {max_attempts: 3, backoff_ms: [1000]}
    params: {password: "${DB_PASSWORD}", table: "sessions"}
"""

# The fields declared after this test was written, in order: the message lists every field.
_LATER_FIELDS = "".join(f", {name}" for name in FILE_FIELDS[FILE_FIELDS.index("catchup") + 1:])


@pytest.fixture
def engine(database: TestDatabase) -> Iterator[Engine]:
    made = create_engine(database.url)
    yield made
    close_engine(made)


@pytest.fixture(autouse=True)
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPORTS_AUTH", SECRET)
    monkeypatch.setenv("DB_PASSWORD", PASSWORD)


class Cli:
    def __init__(self, database: TestDatabase, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        self.url, self.capsys, self.tmp_path = database.url, capsys, tmp_path

    def __call__(self, *words: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main([*words, "--database-url", self.url])
        out, err = self.capsys.readouterr()
        return code, out, err

    def file(self, text: str, name: str = "tasks.yaml") -> str:
        path = self.tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return str(path)


@pytest.fixture
def cli(database: TestDatabase, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Cli:
    return Cli(database, capsys, tmp_path)


def _stored(engine: Engine) -> dict[str, tuple[int, int | None]]:
    """Each task's (revision, updated_at): what any write would move."""
    return {task.id: (task.revision, task.updated_at) for task in TaskRepository(engine).load_all()[1]}


def _dashboard_task(engine: Engine, task_id: str = "made-by-hand") -> None:
    scheduler = Scheduler(engine)
    scheduler.init()
    try:
        scheduler.register(TaskDefinition(id=task_id, name="By hand", cron="0 9 * * 1"))
    finally:
        scheduler.close()


def test_apply_twice_the_second_changes_nothing(cli: Cli, engine: Engine) -> None:
    path = cli.file(FILE)
    code, out, _ = cli("tasks", "apply", path)
    assert code == 0
    assert "create     nightly" in out and "create     cleanup" in out
    assert "applied: 2 to create, 0 to update, 0 to delete, 0 unchanged" in out
    stored = TaskRepository(engine).get("nightly")
    assert stored is not None and stored.handler is not None and stored.handler["headers"]["Authorization"] == SECRET
    assert TaskFileRepository(engine).sources() == {"nightly": "tasks", "cleanup": "tasks"}
    before = _stored(engine)
    code, out, _ = cli("tasks", "apply", path)
    assert (code, out.splitlines()[-1]) == (0, "no change (2 unchanged)")
    assert _stored(engine) == before
    assert SECRET not in out and PASSWORD not in out


def test_an_edited_field_is_shown_and_updated(cli: Cli, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    cli("tasks", "apply", cli.file(FILE))
    monkeypatch.setenv("REPORTS_AUTH", "Bearer rotated-secret-0000")
    code, out, _ = cli("tasks", "apply", cli.file(FILE.replace('"0 2 * * *"', '"30 3 * * *"')))
    assert code == 0
    assert "update     nightly: cron, handler" in out and "unchanged  cleanup" in out
    assert "    cron: '0 2 * * *' -> '30 3 * * *'" in out
    assert "    handler.headers.Authorization: '***' -> '***'" in out  # which secret changed, never its value
    assert "rotated-secret" not in out and SECRET not in out
    stored = TaskRepository(engine).get("nightly")
    assert stored is not None and stored.cron == "30 3 * * *" and stored.revision == 2


def test_prune_deletes_only_the_files_own_tasks(cli: Cli, engine: Engine) -> None:
    cli("tasks", "apply", cli.file(FILE))
    cli("tasks", "apply", cli.file("tasks: [{id: other-file, name: Other, cron: '0 1 * * *'}]", "other.yaml"))
    _dashboard_task(engine)
    only_nightly = FILE.split("  - id: cleanup")[0]
    code, out, _ = cli("tasks", "apply", cli.file(only_nightly))
    assert code == 0 and "\ndelete" not in out and "cleanup" in _stored(engine)  # without --prune: kept
    code, out, _ = cli("tasks", "apply", cli.file(only_nightly), "--prune")
    assert code == 0 and "delete     cleanup" in out
    assert "made-by-hand" not in out and "other-file" not in out
    assert set(_stored(engine)) == {"nightly", "other-file", "made-by-hand"}
    empty = cli.file("tasks: []")
    code, out, _ = cli("tasks", "apply", empty, "--prune", "--source", "tasks")
    assert code == 0 and "delete     nightly" in out and set(_stored(engine)) == {"other-file", "made-by-hand"}


def test_a_file_applies_to_one_team_and_prune_never_touches_another_teams_tasks(cli: Cli, engine: Engine) -> None:
    """docs/teams.md: ``team:`` at the top; an entry naming another team is refused whole; the
    same source applied for another team prunes only that team's tasks; export writes one team."""
    from scheduler_core.runtime.accounts import Accounts

    Accounts(engine).create_team("ops")
    code, _, _ = cli("tasks", "apply", cli.file(FILE))  # team default
    assert code == 0
    ops = cli.file("team: ops\ntasks: [{id: ops-job, name: Ops job, cron: '0 6 * * *'}]", "tasks.yaml")
    code, out, _ = cli("tasks", "apply", ops, "--prune")  # the same source (tasks), another team
    assert code == 0 and "create     ops-job" in out and "\ndelete" not in out
    assert set(_stored(engine)) == {"nightly", "cleanup", "ops-job"}
    assert TaskRepository(engine).get("ops-job").team == "ops"
    mixed = cli.file("team: ops\ntasks: [{id: sneaky, name: S, cron: '0 6 * * *', team: default}]", "mixed.yaml")
    code, _, err = cli("tasks", "apply", mixed)
    assert code == 1 and "tasks.sneaky.team: the file applies to team 'ops'" in err and "sneaky" not in _stored(engine)
    moved = cli.file("team: ops\ntasks: [{id: nightly, name: Nightly report, cron: '0 2 * * *'}]", "pull.yaml")
    before = _stored(engine)
    code, _, err = cli("tasks", "apply", moved)  # default's task named in a file of ops: never moved by a file
    assert code == 1 and "tasks.nightly.team: is a task of team 'default'; this file applies to team 'ops'" in err
    assert _stored(engine) == before and TaskRepository(engine).get("nightly").team == "default"
    code, _, err = cli("tasks", "apply", cli.file("team: Ops!\ntasks: []", "bad.yaml"))
    assert code == 1 and "team: must be a team id" in err
    code, out, err = cli("tasks", "export", "--team", "ops")
    assert code == 0 and out.startswith("team: ops\n") and "ops-job" in out and "nightly" not in out
    code, out, err = cli("tasks", "export")
    assert "ops-job" not in out and "nightly" in out and "not in this file: the tasks of team ops" in err
    code, out, _ = cli("tasks", "apply", cli.file("team: ops\ntasks: []", "tasks.yaml"), "--prune")
    assert code == 0 and "delete     ops-job" in out and set(_stored(engine)) == {"nightly", "cleanup"}


def test_a_dry_run_changes_nothing(cli: Cli, engine: Engine) -> None:
    cli("tasks", "apply", cli.file(FILE))
    before = _stored(engine)
    edited = FILE.replace('"0 2 * * *"', '"0 4 * * *"').split("  - id: cleanup")[0]
    code, out, _ = cli("tasks", "apply", cli.file(edited + "  - id: fresh\n    name: Fresh\n    cron: '@daily'\n"),
                       "--prune", "--dry-run")
    assert code == 0
    assert {"update     nightly: cron", "create     fresh", "delete     cleanup"} <= set(out.splitlines())
    assert out.splitlines()[-1] == "1 to create, 1 to update, 1 to delete, 0 unchanged (dry run: nothing applied)"
    assert _stored(engine) == before


BAD_FILES = [
    ("tasks: [{id: a, name: A, cron: '0 2 * * *'}\n  - : :", "FILE", "is not YAML"),
    ("tasks:\n  - {id: a, name: A, cron: '0 2 * * *'}\n  - {id: b, name: B, cron: '0 2 * * *', colour: red}",
     "tasks.b.colour", "is not a task field"),
    ("tasks:\n  - {id: a, name: A, cron: '0 2 * * *'}\n  - {id: b, name: B, cron: '0 25 * * *'}",
     "tasks.b.cron", "hour takes 0-23"),
    ("tasks:\n  - {id: a, name: A, cron: '0 2 * * *'}\n  - {id: a, name: A2, cron: '0 3 * * *'}",
     "tasks.a", "appears twice in the file (entries 1 and 2)"),
    ("tasks:\n  - {id: a, name: A, cron: '0 2 * * *'}\n  - {id: b, name: B, cron: '0 2 * * *', "
     "params: {token: '${NOT_SET_ANYWHERE}'}}", "tasks.b.params.token", "NOT_SET_ANYWHERE, which is not set"),
    ("tasks:\n  - {id: a, name: A, cron: '0 2 * * *', retry: {max_attempts: 0}}",
     "tasks.a.retry.max_attempts", "between 1 and 100"),
    ("tasks:\n  - {id: a, name: A, cron: '0 2 * * *', enabled: maybe}", "tasks.a.enabled", ""),
    ("tasks: {id: a}", "tasks", "must be a list of tasks"),
    ("jobs: []", "jobs", "is not a task file key"),
]


@pytest.mark.parametrize(("text", "field", "message"), BAD_FILES, ids=[f[1] + str(i) for i, f in enumerate(BAD_FILES)])
def test_a_bad_file_is_one_line_and_changes_nothing(cli: Cli, engine: Engine, text: str, field: str,
                                                    message: str) -> None:
    cli("tasks", "apply", cli.file(FILE))
    before = _stored(engine)
    code, out, err = cli("tasks", "apply", cli.file(text, "bad.yaml"), "--prune", "--source", "tasks")
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("error: hai:scheduler:0"), err
    assert f" {field}: " in err and message in err, err
    assert _stored(engine) == before


def test_a_missing_file_and_a_bad_source_are_named(cli: Cli, engine: Engine) -> None:
    code, _, err = cli("tasks", "apply", str(cli.tmp_path / "absent.yaml"))
    assert code == 1 and err.startswith("error: hai:scheduler:012 FILE: cannot read") and len(err.splitlines()) == 1
    code, _, err = cli("tasks", "apply", cli.file(FILE), "--source", "bad\x01name")
    assert code == 1 and " --source: " in err
    assert _stored(engine) == {}


def test_export_holds_no_secret_and_applies_as_no_change(cli: Cli, engine: Engine) -> None:
    cli("tasks", "apply", cli.file(FILE))
    _dashboard_task(engine)
    out_file = cli.tmp_path / "exported.yaml"
    code, out, err = cli("tasks", "export", str(out_file))
    exported = out_file.read_text(encoding="utf-8")
    assert code == 0 and SECRET not in exported + out + err and PASSWORD not in exported + out + err
    assert "${HAI_TASK_NIGHTLY_HANDLER_HEADERS_AUTHORIZATION}" in exported
    assert "${HAI_TASK_CLEANUP_PARAMS_PASSWORD}" in exported
    assert "HAI_TASK_NIGHTLY_HANDLER_HEADERS_AUTHORIZATION  (tasks.nightly.handler.headers.Authorization)" in err
    assert "X-Team: ops" in exported  # not a secret: written as it is
    code, stdout_export, _ = cli("tasks", "export")
    assert code == 0 and stdout_export == exported
    environ = {"HAI_TASK_NIGHTLY_HANDLER_HEADERS_AUTHORIZATION": SECRET, "HAI_TASK_CLEANUP_PARAMS_PASSWORD": PASSWORD}
    missing_env_code, _, missing = cli("tasks", "apply", str(out_file))
    assert missing_env_code == 1 and "HAI_TASK_CLEANUP_PARAMS_PASSWORD, which is not set" in missing
    before = _stored(engine)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environ.items():
            patch.setenv(name, value)
        code, out, _ = cli("tasks", "apply", str(out_file), "--source", "tasks")
    assert (code, out.splitlines()[-1]) == (0, "no change (3 unchanged)")
    assert _stored(engine) == before
    json_file = cli.tmp_path / "exported.json"
    assert cli("tasks", "export", str(json_file))[0] == 0 and SECRET not in json_file.read_text(encoding="utf-8")


def test_a_literal_dollar_brace_round_trips(cli: Cli, engine: Engine) -> None:
    cli("tasks", "apply", cli.file("tasks: [{id: t, name: 'costs $${HOME}', cron: '0 2 * * *', "
                                   "params: {template: 'Hi $${name}'}}]"))
    stored = TaskRepository(engine).get("t")
    assert stored is not None and stored.name == "costs ${HOME}" and stored.params == {"template": "Hi ${name}"}
    out_file = cli.tmp_path / "e.yaml"
    cli("tasks", "export", str(out_file))
    assert cli("tasks", "apply", str(out_file), "--source", "tasks")[1].splitlines()[-1] == "no change (1 unchanged)"


def test_list_shows_each_task(cli: Cli, engine: Engine) -> None:
    cli("tasks", "apply", cli.file(FILE))
    _dashboard_task(engine)
    code, out, _ = cli("tasks", "list")
    assert code == 0
    assert out.splitlines() == ["cleanup\tenabled\t*/5 * * * *\tUTC\thook\tfile:tasks",
                                "made-by-hand\tenabled\t0 9 * * 1\tUTC\thook\t-",
                                "nightly\tenabled\t0 2 * * *\tEurope/Berlin\tapi\tfile:tasks"]


def test_trigger_hands_the_occurrence_to_a_live_node(cli: Cli, engine: Engine) -> None:
    _dashboard_task(engine, "job")
    code, out, _ = cli("tasks", "trigger", "job")
    assert code == 1 and out.startswith("job: occurrence ") and out.rstrip().endswith("missed (no_capable_node)")
    ran: list[Any] = []
    node = Scheduler(engine, hooks={"on_task_execute": lambda event: ran.append(event.context.source) or "ok"})
    node.init()
    node.start()
    try:  # its first tick's heartbeat (on its own thread, after start() returns) says it runs hook tasks
        wait_for(lambda: any(n.node_id == node.config.node_id for n in NodeRepository(engine).alive(60_000)[1]),
                 "the node's first heartbeat", timeout=20)
        code, out, _ = cli("tasks", "trigger", "job", "--idempotency-key", "deploy-42")
        # queued for the node; it may have claimed (or even run) it before the command read it back
        assert code == 0 and out.split()[3] in ("queued", "running", "success"), out
        occurrence = out.split()[2]
        wait_for_status(node, occurrence, "success")
        assert cli("tasks", "trigger", "job", "--idempotency-key", "deploy-42")[1].split()[2] == occurrence
    finally:
        node.close()
    assert ran == ["cli"]
    code, _, err = cli("tasks", "trigger", "nope")
    assert code == 1 and err.startswith("error: hai:scheduler:020")


def test_an_update_loses_to_a_change_made_after_the_plan(engine: Engine, tmp_path: Path) -> None:
    scheduler = Scheduler(engine)
    scheduler.init()
    try:
        scheduler.register(TaskDefinition(id="nightly", name="Old", cron="0 2 * * *"))
        path = tmp_path / "tasks.yaml"
        path.write_text("tasks: [{id: nightly, name: New, cron: '0 2 * * *'}]", encoding="utf-8")
        task_file = read_task_file(str(path), {})
        [step] = plan(scheduler, task_file, "tasks", prune=False).steps
        assert step.change == Change.UPDATE and step.fields == ("name",)
        scheduler.update_task("nightly", cron="0 5 * * *")  # an operator, meanwhile
        with pytest.raises(ConflictError):
            apply_step(scheduler, step, "tasks")
        stored = scheduler.task_ops.get("nightly")
        assert (stored.name, stored.cron) == ("Old", "0 5 * * *")
    finally:
        scheduler.close()


def test_the_command_runs_as_a_process(tmp_path: Path) -> None:
    """Once as a real process (SQLite): the entry function runs on every database above."""
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks:\n  - {id: a, name: A, cron: '0 2 * * *', colour: red}\n", encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "HAI_DATABASE_URL": f"sqlite:///{tmp_path}/p.db"}
    done = subprocess.run([sys.executable, "-m", "webapp.cli", "tasks", "apply", str(path)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "error: hai:scheduler:012 tasks.a.colour: is not a task field (line 2; the fields: id, " \
                          "name, cron, team, description, timezone, enabled, calendar, delete_after_run, idempotent, " \
                          f"retry, handler, params, node_group, catchup{_LATER_FIELDS})\n"
