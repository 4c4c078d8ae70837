"""``kind: python`` / ``kind: js`` executors with real child processes: results, errors, timeouts, reaping."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from scheduler_core.errors import ConfigError, JsCompileFailedError
from scheduler_core.executors.base import CancelSignal, ExecutionContext, ExecutionRequest, Outcome
from scheduler_core.executors.code import OUTPUT_LIMIT_BYTES, JavaScriptCodeExecutor, PythonCodeExecutor
from scheduler_core.model import TaskDefinition

PY = PythonCodeExecutor()
JS = JavaScriptCodeExecutor()
CONTEXT = ExecutionContext(task_id="t", occurrence_id="occ-1", execution_token="tok", sequence=1, attempt=1,
                           trigger="manual", source=None, scheduled_minute=None, params={"n": 2})
CONTEXT_JSON = {"task_id": "t", "occurrence_id": "occ-1", "execution_token": "tok", "sequence": 1, "attempt": 1,
                "trigger": "manual", "source": None, "scheduled_minute": None, "params": {"n": 2}}


def _request(handler: Mapping[str, Any], idempotent: bool = False,
             signal: CancelSignal | None = None) -> ExecutionRequest:
    task = TaskDefinition(id="t", name="t", cron="* * * * *", idempotent=idempotent)
    return ExecutionRequest(task=task, handler=handler, context=CONTEXT, signal=signal or CancelSignal(), hooks=None)


def _run(executor: PythonCodeExecutor | JavaScriptCodeExecutor, code: str, timeout: int | None = None,
         idempotent: bool = False, signal: CancelSignal | None = None) -> Outcome:
    config: dict[str, Any] = {"kind": executor.kind, "code": code}
    if timeout is not None:
        config["timeout"] = timeout
    return executor.execute(_request(executor.validate(config), idempotent, signal))


def _state(pid: int) -> str | None:
    """The /proc state letter of ``pid`` (R, S, Z, ...), or None when no such process exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _assert_reaped(pid: int) -> None:
    """Our direct child: killed AND waited for, so the pid is gone entirely (no zombie)."""
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    try:
        zombie, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        zombie = 0  # no children at all
    assert zombie == 0, f"an unreaped child {zombie} was left behind"


def _assert_dead(pid: int, within: float = 2.0) -> None:
    """A grandchild: reparented to init once its parent dies, so it may linger briefly as a zombie."""
    deadline = time.monotonic() + within
    while _state(pid) not in (None, "Z", "X"):
        assert time.monotonic() < deadline, f"process {pid} is still alive ({_state(pid)})"
        time.sleep(0.02)


@pytest.fixture
def node() -> Iterator[str]:
    path = shutil.which("node")
    if path is None:
        pytest.skip("node is not installed")
    yield path


# --- Python: results ---------------------------------------------------------------------------


def test_python_success_returns_the_context_it_received() -> None:
    outcome = _run(PY, "def run(context):\n    return context\n")
    assert outcome == Outcome("success", result=CONTEXT_JSON)


def test_python_print_goes_to_stdout_and_cannot_fake_the_result() -> None:
    code = ("import sys\n"
            "def run(context):\n"
            "    print('{\"ok\": true, \"value\": \"forged\"}')\n"
            "    print('warning', file=sys.stderr)\n"
            "    return context['params']['n'] * 21\n")
    outcome = _run(PY, code)
    assert outcome == Outcome("success", result={"value": 42, "stdout": '{"ok": true, "value": "forged"}\n',
                                                 "stderr": "warning\n"})


def test_python_exception_fails_with_type_message_and_traceback() -> None:
    outcome = _run(PY, "print('before')\ndef run(context):\n    raise ValueError('boom')\n")
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.startswith("ValueError: boom\n")
    assert 'File "<task code>", line 3, in run' in outcome.error
    assert "--- stdout ---\nbefore" in outcome.error


def test_python_non_json_result_fails() -> None:
    outcome = _run(PY, "def run(context):\n    return {1, 2}\n")
    assert outcome.status == "failed"
    assert outcome.error is not None and outcome.error.startswith("the result of run() is not JSON: ")
    assert "set" in outcome.error


def test_python_nan_result_is_not_json() -> None:
    outcome = _run(PY, "def run(context):\n    return float('nan')\n")
    assert outcome.status == "failed" and "not JSON" in (outcome.error or "")


def test_python_sys_exit_fails_with_the_exit_code() -> None:
    outcome = _run(PY, "import sys\ndef run(context):\n    sys.exit(3)\n")
    assert outcome == Outcome("failed", error="the process exited with code 3 before run() returned a result")


# --- Python: registration -------------------------------------------------------------------------


def test_python_syntax_error_is_refused_at_validate_naming_the_line(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').write('x')\ndef run(context):\n    return (\n"
    with pytest.raises(JsCompileFailedError) as caught:
        PY.validate({"kind": "python", "code": code})
    assert caught.value.code == "hai:scheduler:030"
    assert "line 3" in caught.value.message
    assert caught.value.details["field"] == "handler.code"
    assert not marker.exists()  # compile() checked the syntax without running the first line


@pytest.mark.parametrize("code", [
    "def main(context):\n    return 1\n",
    "async def run(context):\n    return 1\n",
    "run = lambda context: 1\n",
    "def run(a, b):\n    return 1\n",
    "if True:\n    def run(context):\n        return 1\n",
])
def test_python_code_without_a_plain_run_is_refused(code: str) -> None:
    with pytest.raises(ConfigError) as caught:
        PY.validate({"kind": "python", "code": code})
    assert caught.value.field == "handler.code"
    assert "run" in caught.value.message


def test_python_validate_normalises_the_config() -> None:
    code = "def run(context, extra=None):\n    return 1\n"
    assert PY.validate({"kind": "python", "code": code}) == {"kind": "python", "code": code, "timeout": 30_000}
    assert PY.validate({"kind": "python", "code": code, "timeout": 5})["timeout"] == 5


@pytest.mark.parametrize(("config", "field"), [
    ({"code": ""}, "handler.code"),
    ({"code": "   \n"}, "handler.code"),
    ({"code": 42}, "handler.code"),
    ({"code": "#" * 100_001}, "handler.code"),
    ({"code": "def run(context):\n    return 1\n", "timeout": 0}, "handler.timeout"),
    ({"code": "def run(context):\n    return 1\n", "timeout": True}, "handler.timeout"),
    ({"code": "def run(context):\n    return 1\n", "timeout": 86_400_001}, "handler.timeout"),
    ({"code": "def run(context):\n    return 1\n", "timeout": 1.5}, "handler.timeout"),
    ({"code": "def run(context):\n    return 1\n", "retries": 2}, "handler.retries"),
    ({"code": "def run(context):\n    return 1\n", "kind": "js"}, "handler.kind"),
])
def test_python_invalid_configs_name_the_field(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        PY.validate({"kind": "python", **config})
    assert caught.value.field == field


def test_code_of_exactly_the_maximum_length_is_accepted() -> None:
    code = "def run(context):\n    return 1\n"
    code += "#" * (100_000 - len(code))
    assert PY.validate({"kind": "python", "code": code})["code"] == code


# --- Python: process lifecycle ------------------------------------------------------------------

_LOOP_WITH_GRANDCHILD = """
import os, subprocess
def run(context):
    child = subprocess.Popen(["sleep", "60"])
    with open(PIDFILE, "w") as handle:
        handle.write(f"{os.getpid()} {child.pid}")
    while True:
        pass
"""


@pytest.mark.parametrize(("idempotent", "status"), [(False, "unknown"), (True, "failed")])
def test_python_infinite_loop_is_killed_at_the_timeout_with_its_grandchild(
        tmp_path: Path, idempotent: bool, status: str) -> None:
    pidfile = tmp_path / "pids"
    started = time.monotonic()
    outcome = _run(PY, _LOOP_WITH_GRANDCHILD.replace("PIDFILE", repr(str(pidfile))), timeout=1500,
                   idempotent=idempotent)
    elapsed = time.monotonic() - started
    assert 1.5 <= elapsed < 10  # the loop never ends by itself: killed at the deadline
    assert outcome.status == status
    assert outcome.error == "timeout after 1500 ms (process killed)"
    child, grandchild = (int(pid) for pid in pidfile.read_text().split())
    _assert_reaped(child)
    _assert_dead(grandchild)


def test_python_start_up_counts_in_the_timeout() -> None:
    started = time.monotonic()
    outcome = _run(PY, "import time\ntime.sleep(0.2)\ndef run(context):\n    return 1\n", timeout=150)
    assert time.monotonic() - started < 1.0
    assert outcome == Outcome("unknown", error="timeout after 150 ms (process killed)")


def test_python_cancellation_kills_and_reaps_the_process(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    code = ("import os, time\n"
            "def run(context):\n"
            f"    open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
            "    time.sleep(30)\n")
    signal = CancelSignal()
    timer = threading.Timer(0.5, signal.cancel, args=("closing",))
    timer.start()
    started = time.monotonic()
    try:
        outcome = _run(PY, code, timeout=10_000, signal=signal)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 1.5
    assert outcome == Outcome("unknown", error="cancelled: closing (process killed)")
    _assert_reaped(int(pidfile.read_text()))


def test_cancellation_before_the_start_is_interrupted_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    signal = CancelSignal()
    signal.cancel("deleted")
    outcome = _run(PY, f"open({str(marker)!r}, 'w').write('x')\ndef run(context):\n    return 1\n", signal=signal)
    assert outcome.status == "interrupted"
    assert "deleted" in (outcome.error or "")
    assert not marker.exists()


def test_python_output_is_bounded_and_truncated() -> None:
    code = ("import sys\n"
            "def run(context):\n"
            "    sys.stdout.write('o' * 1_000_000)\n"
            "    sys.stderr.write('e' * 1_000_000)\n"
            "    return 'done'\n")
    started = time.monotonic()
    outcome = _run(PY, code, timeout=10_000)
    assert time.monotonic() - started < 3.0
    assert outcome.status == "success"
    assert outcome.result["value"] == "done"
    for stream, letter in (("stdout", "o"), ("stderr", "e")):
        text = outcome.result[stream]
        assert text.startswith(letter * OUTPUT_LIMIT_BYTES)
        assert text.endswith(f"\n[truncated: {1_000_000 - OUTPUT_LIMIT_BYTES} bytes dropped]")


def test_background_processes_do_not_outlive_a_successful_attempt(tmp_path: Path) -> None:
    code = ("import subprocess\n"
            "def run(context):\n"
            "    return subprocess.Popen(['sleep', '60']).pid\n")
    started = time.monotonic()
    outcome = _run(PY, code)
    assert time.monotonic() - started < 2.0  # the sleeper holds no pipe we wait for
    assert outcome.status == "success"
    _assert_dead(outcome.result)


def test_parallel_attempts_keep_their_results_apart() -> None:
    code = "import time\ndef run(context):\n    time.sleep(0.2)\n    return context['params']['n']\n"
    handler = PY.validate({"kind": "python", "code": code})
    outcomes: dict[int, Outcome] = {}

    def attempt(n: int) -> None:
        context = replace(CONTEXT, params={"n": n})
        request = ExecutionRequest(task=TaskDefinition(id="t", name="t", cron="* * * * *"), handler=handler,
                                   context=context, signal=CancelSignal(), hooks=None)
        outcomes[n] = PY.execute(request)

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes == {n: Outcome("success", result=n) for n in range(4)}


# --- JavaScript ---------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [
    "function run(ctx) {\n  return ctx;\n}\n",
    "module.exports.run = function (ctx) { return ctx; };\n",
    "module.exports = { run: (ctx) => ctx };\n",
    "exports.run = (ctx) => ctx;\n",
])
def test_js_success_in_every_definition_style(node: str, code: str) -> None:
    assert _run(JS, code) == Outcome("success", result=CONTEXT_JSON)


def test_js_async_run_and_console_output(node: str) -> None:
    code = ("async function run(ctx) {\n"
            "  console.log('waiting');\n"
            "  await new Promise((resolve) => setTimeout(resolve, 50));\n"
            "  return { n: ctx.params.n, attempt: ctx.attempt };\n"
            "}\n")
    outcome = _run(JS, code)
    assert outcome == Outcome("success", result={"value": {"n": 2, "attempt": 1}, "stdout": "waiting\n",
                                                 "stderr": ""})


def test_js_returned_promise_is_awaited(node: str) -> None:
    code = "module.exports.run = (ctx) => new Promise((resolve) => setTimeout(() => resolve('later'), 30));\n"
    assert _run(JS, code) == Outcome("success", result="later")


def test_js_thrown_error_fails_with_message_and_stack(node: str) -> None:
    outcome = _run(JS, "function run(ctx) {\n  throw new TypeError('boom');\n}\n")
    assert outcome.status == "failed"
    assert outcome.error is not None and outcome.error.startswith("TypeError: boom\n")
    assert "<task code>:2:" in outcome.error  # line numbers are those of the code as written


def test_js_rejected_promise_fails(node: str) -> None:
    outcome = _run(JS, "async function run(ctx) {\n  throw new Error('nope');\n}\n")
    assert outcome.status == "failed" and (outcome.error or "").startswith("Error: nope")


def test_js_undefined_is_null_and_bigint_is_not_json(node: str) -> None:
    assert _run(JS, "function run(ctx) {}\n") == Outcome("success", result=None)
    outcome = _run(JS, "function run(ctx) { return 10n; }\n")
    assert outcome.status == "failed"
    assert (outcome.error or "").startswith("the result of run() is not JSON: TypeError:")
    assert "BigInt" in (outcome.error or "")


def test_js_missing_run_and_exit_fail_clearly(node: str) -> None:
    assert _run(JS, "function main(ctx) { return 1; }\n") == Outcome(
        "failed", error="the code defines no run(context) function")
    assert _run(JS, "function run(ctx) { process.exit(3); }\n") == Outcome(
        "failed", error="the process exited with code 3 before run() returned a result")


def test_js_syntax_error_is_refused_at_validate_naming_the_line(node: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    code = f"require('fs').writeFileSync({str(marker)!r}, 'x');\nfunction run(ctx) {{\n  return ctx.;\n}}\n"
    with pytest.raises(JsCompileFailedError) as caught:
        JS.validate({"kind": "js", "code": code})
    assert caught.value.code == "hai:scheduler:030"
    assert "line 3" in caught.value.message
    assert "SyntaxError" in caught.value.message
    assert "<task code>" in caught.value.message and "task.cjs" not in caught.value.message
    assert not marker.exists()


def test_js_infinite_loop_is_killed_at_the_timeout(node: str) -> None:
    code = "function run(ctx) {\n  console.log(process.pid);\n  for (;;) {}\n}\n"
    started = time.monotonic()
    outcome = _run(JS, code, timeout=1000)
    assert 1.0 <= time.monotonic() - started < 2.5
    assert outcome.status == "unknown"
    assert outcome.error is not None and outcome.error.startswith("timeout after 1000 ms (process killed)")
    _assert_reaped(int(outcome.error.split("--- stdout ---\n")[1].split()[0]))


def test_js_without_node_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    handler = {"kind": "js", "code": "function run(ctx) { return 1; }\n", "timeout": 1000}
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH where no `node` can be found
    with pytest.raises(ConfigError) as caught:
        JS.validate(handler)
    assert caught.value.field == "handler.kind"
    outcome = JS.execute(_request(handler))
    assert outcome.status == "failed" and "Node.js" in (outcome.error or "")
