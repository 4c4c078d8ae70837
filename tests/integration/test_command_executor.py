"""``kind: command`` with real processes and real signals: exit statuses, a program that cannot start,
timeouts and cancellation stopping the whole process group, a node that dies, bounded output, the
minimal environment; then through a real Scheduler, and refused by the dashboard and the API, on
SQLite, PostgreSQL and MariaDB.

The executor is reached through the public registry only (``ExecutorRegistry().get("command")``),
and the bounds are the documented numbers (docs/executors-and-providers.md §3, ``command``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from scheduler_core import TaskDefinition
from scheduler_core.errors import ConfigError
from scheduler_core.executors import CancelSignal, ExecutionContext, ExecutionRequest, Executor, ExecutorRegistry
from scheduler_core.executors.base import Outcome
from tests.conftest import TestDatabase
from tests.webapp.api_support import assert_problem, make_api
from tests.webapp.conftest import ADMIN_PASSWORD, Auth, csrf_token
from webapp import create_app
from webapp.node import scheduler_of

ROOT = Path(__file__).resolve().parents[2]
SH = shutil.which("sh") or "/bin/sh"
PY = sys.executable
GRACE_S = 5.0  # documented: SIGTERM first, SIGKILL 5 s later
DEFAULT_OUTPUT = 65_536  # documented default of max_output_bytes
CONTEXT = ExecutionContext(task_id="t", occurrence_id="occ-1", execution_token="tok", sequence=1, attempt=1,
                           trigger="manual", source=None, scheduled_minute=None)
# A shell that starts a grandchild in the background, writes both pids, and waits for it.
WITH_GRANDCHILD = 'sleep 60 & echo $! > "$1"; echo $$ > "$2"; wait'


def _command() -> Executor:
    executor = ExecutorRegistry().get("command")
    assert executor is not None, "no executor for kind 'command'"
    return executor


def _handler(argv: list[str], **settings: Any) -> dict[str, Any]:
    return _command().validate({"kind": "command", "argv": argv, **settings})


def _run(argv: list[str], idempotent: bool = False, signal_: CancelSignal | None = None,
         **settings: Any) -> Outcome:
    task = TaskDefinition(id="t", name="t", cron="* * * * *", idempotent=idempotent)
    request = ExecutionRequest(task=task, handler=_handler(argv, **settings), context=CONTEXT,
                               signal=signal_ or CancelSignal(), hooks=None)
    return _command().execute(request)


def _state(pid: int) -> str | None:
    """The /proc state letter of ``pid`` (R, S, Z, ...), or None when no such process exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _group(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])


def _living_members(group: int) -> list[int]:
    """Every process of ``group`` that is still alive (a zombie waiting for init does not count)."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[2]) == group and fields[0] not in ("Z", "X"):
                members.append(int(entry.name))
    return members


def _assert_dead(pid: int, within: float = 2.0) -> None:
    deadline = time.monotonic() + within
    while _state(pid) not in (None, "Z", "X"):
        assert time.monotonic() < deadline, f"process {pid} is still alive ({_state(pid)})"
        time.sleep(0.02)


def _assert_no_child_left() -> None:
    """Nothing this process started is left unreaped (the supervisor was waited for)."""
    try:
        zombie, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        zombie = 0
    assert zombie == 0, f"an unreaped child {zombie} was left behind"


def _pid(path: Path, within: float = 10.0) -> int:
    deadline = time.monotonic() + within
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.02)
    return int(path.read_text())


# --- exit statuses -------------------------------------------------------------------------------


def test_exit_status_0_is_success_with_the_output_as_the_result() -> None:
    outcome = _run([SH, "-c", "echo out; echo err >&2"])
    assert outcome == Outcome("success", result={"exit_code": 0, "stdout": "out\n", "stderr": "err\n"})
    _assert_no_child_left()


def test_argv_reaches_the_program_as_given_without_a_shell() -> None:
    words = ["$HOME", "a b", "*", "; rm -rf /", "`id`", ""]
    outcome = _run([shutil.which("printf") or "/usr/bin/printf", "<%s>\n", *words])
    assert outcome.status == "success"
    assert outcome.result["stdout"] == "".join(f"<{word}>\n" for word in words)


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_non_zero_exit_is_a_definite_failure_with_the_status_and_the_tail_of_stderr(idempotent: bool) -> None:
    script = "echo partial; i=0; while [ $i -lt 500 ]; do echo line-$i >&2; i=$((i+1)); done; " \
             "echo 'fatal: disk full' >&2; exit 3"
    outcome = _run([SH, "-c", script], idempotent=idempotent)
    assert outcome.status == "failed"  # it ran to its end and said so, idempotent or not
    assert outcome.error is not None and outcome.error.startswith("exit status 3\n--- end of stderr ---\n")
    assert outcome.error.endswith("line-499\nfatal: disk full\n")
    assert "line-0\n" not in outcome.error and len(outcome.error) < 2500  # the tail, bounded
    assert outcome.result["exit_code"] == 3 and outcome.result["stdout"] == "partial\n"


def test_a_missing_program_fails_and_nothing_ran(tmp_path: Path) -> None:
    for idempotent in (False, True):
        outcome = _run([str(tmp_path / "no-such-program")], idempotent=idempotent)
        assert outcome.status == "failed"
        assert outcome.error == (f"could not start {tmp_path / 'no-such-program'}: No such file or directory "
                                 "(errno 2); nothing ran")
    _assert_no_child_left()


def test_a_program_that_may_not_be_executed_fails_and_nothing_ran(tmp_path: Path) -> None:
    program = tmp_path / "script"
    program.write_text("#!/bin/sh\ntouch \"$0.ran\"\n")
    program.chmod(0o644)  # no execute bit for anyone: even root gets EACCES
    outcome = _run([str(program)])
    assert outcome.status == "failed"
    assert outcome.error == f"could not start {program}: Permission denied (errno 13); nothing ran"
    assert not (tmp_path / "script.ran").exists()


def test_a_missing_working_directory_fails_naming_handler_cwd(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    outcome = _run([SH, "-c", 'touch "$1"', "sh", str(marker)], cwd=str(tmp_path / "gone"))
    assert outcome.status == "failed"
    assert outcome.error == (f"could not change to handler.cwd {tmp_path / 'gone'}: No such file or directory "
                             "(errno 2); nothing ran")
    assert not marker.exists()


def test_the_working_directory_is_cwd_or_the_root(tmp_path: Path) -> None:
    assert _run([SH, "-c", "pwd"], cwd=str(tmp_path)).result["stdout"] == f"{tmp_path}\n"
    assert _run([SH, "-c", "pwd"]).result["stdout"] == "/\n"


@pytest.mark.parametrize(("idempotent", "status"), [(False, "unknown"), (True, "failed")])
def test_killed_by_a_signal_it_did_not_handle_is_ambiguous(idempotent: bool, status: str) -> None:
    outcome = _run([PY, "-c", "import os, signal; print('halfway', flush=True); os.kill(os.getpid(), signal.SIGUSR1)"],
                   idempotent=idempotent)
    assert outcome.status == status  # it stopped part way: its effect may exist
    assert outcome.error == "killed by SIGUSR1 (signal 10) before it exited"
    assert outcome.result == {"exit_code": None, "signal": "SIGUSR1", "stdout": "halfway\n", "stderr": ""}


# --- the process group: timeout, cancellation, the node's death -----------------------------------


@pytest.mark.parametrize(("idempotent", "status"), [(False, "unknown"), (True, "failed")])
def test_at_the_timeout_the_whole_group_is_stopped_grandchild_included(
        tmp_path: Path, idempotent: bool, status: str) -> None:
    started = time.monotonic()
    outcome = _run([SH, "-c", WITH_GRANDCHILD, "sh", str(tmp_path / "g"), str(tmp_path / "p")], timeout=1000,
                   idempotent=idempotent)
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 1.0 + GRACE_S  # SIGTERM at the timeout ended it: no SIGKILL needed
    assert outcome.status == status
    assert outcome.error == "timeout after 1000 ms; the process group was stopped by SIGTERM"
    assert outcome.result["signal"] == "SIGTERM"
    _assert_dead(int((tmp_path / "p").read_text()))
    _assert_dead(int((tmp_path / "g").read_text()))  # the background sleep: only a group kill reaches it
    _assert_no_child_left()


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    script = 'trap "" TERM; ' + WITH_GRANDCHILD  # the shell and its sleep both ignore SIGTERM
    started = time.monotonic()
    outcome = _run([SH, "-c", script, "sh", str(tmp_path / "g"), str(tmp_path / "p")], timeout=500)
    elapsed = time.monotonic() - started
    assert 0.5 + GRACE_S <= elapsed < 0.5 + GRACE_S + 3
    assert outcome.status == "unknown"
    assert outcome.error == f"timeout after 500 ms; the process group was killed with SIGKILL {GRACE_S:g} s " \
                            "after SIGTERM"
    _assert_dead(int((tmp_path / "p").read_text()))
    _assert_dead(int((tmp_path / "g").read_text()))
    _assert_no_child_left()


def test_cancellation_stops_the_group_promptly(tmp_path: Path) -> None:
    cancel = CancelSignal()
    timer = threading.Timer(0.5, cancel.cancel, args=("closing",))
    timer.start()
    started = time.monotonic()
    try:
        outcome = _run([SH, "-c", WITH_GRANDCHILD, "sh", str(tmp_path / "g"), str(tmp_path / "p")], timeout=60_000,
                       signal_=cancel)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 3.0
    assert outcome.status == "unknown"  # it had started: its effect may exist
    assert outcome.error == "cancelled: closing; the process group was stopped by SIGTERM"
    _assert_dead(int((tmp_path / "p").read_text()))
    _assert_dead(int((tmp_path / "g").read_text()))


def test_cancellation_before_the_start_is_interrupted_and_runs_nothing(tmp_path: Path) -> None:
    cancel = CancelSignal()
    cancel.cancel("deleted")
    marker = tmp_path / "ran"
    outcome = _run([SH, "-c", 'touch "$1"', "sh", str(marker)], signal_=cancel)
    assert outcome == Outcome("interrupted", error="cancelled before the program started: deleted")
    assert not marker.exists()


def test_background_processes_do_not_outlive_a_successful_attempt() -> None:
    started = time.monotonic()
    outcome = _run([SH, "-c", "sleep 60 & echo $!"])
    assert time.monotonic() - started < 3.0  # the sleeper holds stdout open: the group kill ends it
    assert outcome.status == "success"
    _assert_dead(int(outcome.result["stdout"]))


_NODE = """
import json, sys
from scheduler_core import TaskDefinition
from scheduler_core.executors import CancelSignal, ExecutionContext, ExecutionRequest, ExecutorRegistry
executor = ExecutorRegistry().get("command")
context = ExecutionContext(task_id="t", occurrence_id="o", execution_token="k", sequence=1, attempt=1,
                           trigger="manual", source=None, scheduled_minute=None)
executor.execute(ExecutionRequest(task=TaskDefinition(id="t", name="t", cron="* * * * *"),
                                  handler=executor.validate(json.loads(sys.argv[1])), context=context,
                                  signal=CancelSignal(), hooks=None))
"""


def test_the_program_and_its_group_die_with_the_node(tmp_path: Path) -> None:
    """A node killed with SIGKILL (no clean-up of its own can run) takes its command's group with it."""
    handler = {"kind": "command", "argv": [SH, "-c", WITH_GRANDCHILD, "sh", str(tmp_path / "g"), str(tmp_path / "p")],
               "timeout": 60_000}
    node = subprocess.Popen([PY, "-c", _NODE, json.dumps(handler)], cwd=ROOT)
    try:
        program, grandchild = _pid(tmp_path / "p"), _pid(tmp_path / "g")
        group = _group(program)
        assert group != os.getpgid(0) and grandchild in _living_members(group)
        node.send_signal(signal.SIGKILL)
        node.wait(10)
        _assert_dead(program, within=GRACE_S)
        _assert_dead(grandchild, within=GRACE_S)
        deadline = time.monotonic() + 2
        while _living_members(group):  # the supervisor, too, is gone
            assert time.monotonic() < deadline, f"left in the group: {_living_members(group)}"
            time.sleep(0.02)
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()


# --- output and environment ----------------------------------------------------------------------


def test_output_keeps_its_first_and_last_halves() -> None:
    code = "import sys; sys.stdout.write('a' * 1000 + 'b' * 100_000 + 'z' * 1000); sys.stderr.write('E' * 5000)"
    outcome = _run([PY, "-c", code], max_output_bytes=2000)
    assert outcome.status == "success"
    assert outcome.result["stdout"] == "a" * 1000 + "\n[truncated: 100000 bytes dropped]\n" + "z" * 1000
    assert outcome.result["stderr"] == "E" * 1000 + "\n[truncated: 3000 bytes dropped]\n" + "E" * 1000


def test_output_is_bounded_by_default() -> None:
    code = "import sys; sys.stdout.write('o' * 3_000_000)"
    started = time.monotonic()
    outcome = _run([PY, "-c", code])
    assert time.monotonic() - started < 5.0
    half = DEFAULT_OUTPUT // 2
    dropped = 3_000_000 - DEFAULT_OUTPUT
    assert outcome.result["stdout"] == "o" * half + f"\n[truncated: {dropped} bytes dropped]\n" + "o" * half


def _environment(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines())


def test_the_environment_is_minimal_and_the_nodes_secrets_stay_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAI_TASK_BILLING_TOKEN", "node-secret-7f3a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "node-secret-aws")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("HOME", "/home/scheduler")
    outcome = _run(["env"], env={"GREETING": "hello", "LANG": "C"})
    assert outcome.status == "success"
    assert "node-secret" not in outcome.result["stdout"]
    occurrence = {"SCHEDULER_TASK_ID": "t", "SCHEDULER_OCCURRENCE_ID": "occ-1", "SCHEDULER_ATTEMPT": "1"}
    assert _environment(outcome.result["stdout"]) == {"PATH": os.environ["PATH"], "LANG": "C",
                                                      "HOME": "/home/scheduler", "GREETING": "hello", **occurrence}
    monkeypatch.delenv("LANG")
    monkeypatch.delenv("HOME")
    # The occurrence's variables replace the handler's own of the same name, as the api kind's headers do.
    outcome = _run(["env"], env={"SCHEDULER_OCCURRENCE_ID": "mine"})
    assert _environment(outcome.result["stdout"]) == {"PATH": os.environ["PATH"], **occurrence}


def test_secret_values_of_the_handlers_env_are_masked_in_output_and_error(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    script = 'printf %s "$DB_PASSWORD" > "$1"; echo "connecting with $DB_PASSWORD"; echo "$DB_PASSWORD denied" >&2; ' \
             "exit 2"
    outcome = _run([SH, "-c", script, "sh", str(seen)], env={"DB_PASSWORD": "hunter2-pw", "REGION": "eu-west"})
    assert seen.read_text() == "hunter2-pw"  # the program got the real value
    assert outcome.status == "failed" and "hunter2" not in json.dumps([outcome.result, outcome.error])
    assert outcome.result["stdout"] == "connecting with ***\n" and "*** denied" in (outcome.error or "")


# --- through a real Scheduler, on every database -------------------------------------------------


def _task(task_id: str, argv: list[str], **settings: Any) -> TaskDefinition:
    handler: dict[str, Any] = {"kind": "command", "argv": argv, **settings.pop("handler", {})}
    return TaskDefinition(id=task_id, name=task_id, cron="0 2 * * *", handler=handler, **settings)


def test_a_command_task_runs_and_its_result_is_journaled(make_node: Any) -> None:
    node = make_node()
    stored = node.register(_task("dump", ["printf", "%s", "dumped"], params={"n": 1}))
    assert stored.handler is not None and stored.handler["argv"][0] == shutil.which("printf")  # resolved once
    log = node.trigger("dump")
    assert (log.status, log.persistence.status) == ("success", "persisted")
    assert log.result == {"exit_code": 0, "stdout": "dumped", "stderr": ""}
    assert node.get_logs(task_id="dump")[0].result == log.result


def test_registration_refuses_a_bad_handler_naming_its_field(make_node: Any) -> None:
    node = make_node()
    for handler, field in (({"argv": ["bin/dump"]}, "handler.argv[0]"), ({"argv": "pg_dump -f x"}, "handler.argv"),
                           ({"argv": [SH, "-c", "x\x00"]}, "handler.argv[2]"),
                           ({"argv": [SH], "timeout": 0}, "handler.timeout"),
                           ({"argv": [SH], "env": {"A B": "x"}}, "handler.env.A B"),
                           ({"argv": [SH], "cwd": "srv"}, "handler.cwd")):
        with pytest.raises(ConfigError) as caught:
            node.register(TaskDefinition(id="bad", name="Bad", cron="0 2 * * *",
                                         handler={"kind": "command", **handler}))
        assert caught.value.field == field
    assert node.tasks == ()


def test_a_non_zero_exit_fails_and_frees_the_slot(make_node: Any) -> None:
    node = make_node()
    node.register(_task("check", [SH, "-c", "echo 'no backup found' >&2; exit 4"]))
    log = node.trigger("check")
    assert log.status == "failed" and log.error == "exit status 4\n--- end of stderr ---\nno backup found\n"
    assert log.result == {"exit_code": 4, "stdout": "", "stderr": "no backup found\n"}
    assert node.trigger("check").status == "failed"  # not skipped: a definite failure keeps no slot


def test_a_timed_out_command_is_unknown_and_keeps_the_slot(make_node: Any) -> None:
    node = make_node()
    node.register(_task("slow", ["sleep", "30"], handler={"timeout": 500}))
    log = node.trigger("slow")
    assert log.status == "unknown" and log.error == "timeout after 500 ms; the process group was stopped by SIGTERM"
    assert node.trigger("slow").status == "skipped"  # the unknown execution holds the slot
    assert [e.occurrence_id for e in node.execution.list_unknown()] == [log.occurrence_id]


def test_an_idempotent_command_killed_by_a_signal_is_retried(make_node: Any, tmp_path: Path) -> None:
    counter = tmp_path / "tries"
    script = 'echo "$SCHEDULER_OCCURRENCE_ID $SCHEDULER_ATTEMPT" >> "$1"; kill -USR1 $$'
    node = make_node()
    node.register(_task("retry", [SH, "-c", script, "sh", str(counter)], idempotent=True,
                        retry={"max_attempts": 2, "backoff_ms": [0]}))
    log = node.trigger("retry")
    assert (log.status, log.attempt) == ("failed", 2)
    # Both attempts had the same idempotency key: the occurrence id.
    assert counter.read_text() == f"{log.occurrence_id} 1\n{log.occurrence_id} 2\n"
    assert log.error is not None and log.error.startswith("killed by SIGUSR1")


def test_close_stops_a_running_command(make_node: Any, tmp_path: Path) -> None:
    node = make_node()
    node.register(_task("sleeper", [SH, "-c", WITH_GRANDCHILD, "sh", str(tmp_path / "g"), str(tmp_path / "p")],
                        handler={"timeout": 60_000}))
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(node.trigger("sleeper")))
    worker.start()
    program, grandchild = _pid(tmp_path / "p", within=15), _pid(tmp_path / "g", within=15)
    started = time.monotonic()
    node.close()
    worker.join(15)
    assert time.monotonic() - started < 5
    assert result[0].status == "unknown"  # the program had started: its effect may exist
    _assert_dead(program)
    _assert_dead(grandchild)


# --- the dashboard and the API refuse it, on every database --------------------------------------


@pytest.fixture
def dashboard(database: TestDatabase) -> Iterator[Flask]:
    app = create_app({"DATABASE_URL": database.url, "ADMIN_PASSWORD": ADMIN_PASSWORD, "TESTING": True,
                      "SECRET_KEY": "command-tests-" + "k" * 32})
    yield app
    app.extensions["hai_scheduler"].close()
    app.extensions["hai_reach"].close()
    from scheduler_core.db import close_engine

    close_engine(app.extensions["hai_engine"])


def _field_error(page: str, field: str) -> str:
    start = page.find(f'id="{field}-error">')
    assert start >= 0, f"no error shown for {field}"
    return page[start:].split(">", 1)[1].split("<", 1)[0].replace("&#39;", "'")


FORM = {"id": "dump", "name": "Dump", "cron": "0 3 * * *", "timezone": "UTC", "retry_max_attempts": "1",
        "kind": "command", "argv": '["/usr/bin/pg_dump", "app"]'}


def _refused_kind(message: str) -> None:
    assert "command" in message and "never accepts code" in message, message


def test_the_form_and_the_api_refuse_a_command_naming_the_field(dashboard: Flask) -> None:
    api = make_api(dashboard)
    browser = dashboard.test_client()
    Auth(browser).login()
    page = browser.post("/tasks/new", data={**FORM, "csrf_token": csrf_token(browser, "/tasks/")})
    assert page.status_code == 400
    _refused_kind(_field_error(page.get_data(as_text=True), "kind"))
    answer = api.call("POST", "/api/v1/tasks", body={"id": "dump", "name": "Dump", "cron": "0 3 * * *",
                                                     "handler": {"kind": "command", "argv": ["/usr/bin/pg_dump"]}})
    _refused_kind(assert_problem(answer, 422, "hai:scheduler:012", "handler.kind")["detail"])
    scheduler = scheduler_of(dashboard)
    assert "dump" not in [task.id for task in scheduler.refresh_tasks()]
    # A command task the application registered: read-only on the dashboard and in the API, but for enabled.
    scheduler.register(_task("dump", [SH, "-c", "true"]))
    current = scheduler.task_ops.get("dump")
    edited = browser.post("/tasks/edit/dump", data={**FORM, "kind": "api", "url": "https://example.com/x",
                                                     "method": "POST", "expected_updated_at": current.updated_at,
                                                     "csrf_token": csrf_token(browser, "/tasks/")})
    assert edited.status_code == 400
    _refused_kind(_field_error(edited.get_data(as_text=True), "kind"))
    assert browser.get("/tasks/edit/dump").status_code == 303
    renamed = api.call("PATCH", "/api/v1/tasks/dump", body={"expected_updated_at": current.updated_at, "name": "X"})
    assert_problem(renamed, 422, "hai:scheduler:012", "handler.kind")
    assert scheduler.task_ops.get("dump") == current
    enabled = api.call("PATCH", "/api/v1/tasks/dump", body={"expected_updated_at": current.updated_at,
                                                            "enabled": not current.enabled})
    assert enabled.status_code == 200, enabled.get_data(as_text=True)
