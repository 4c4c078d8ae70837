"""``kind: python`` and ``kind: js``: run a snippet of code in a child process, one process per attempt.

!!! SECURITY WARNING: THIS IS NOT A SANDBOX !!!
================================================

These executors run TRUSTED, server-side code written by the operators of the application,
exactly as if it were part of the application:

* the child process runs with the full privileges of the scheduler node (same user, same
  filesystem, same network, same environment variables -- secrets included);
* nothing restricts what the code imports, reads, writes, spawns or connects to;
* the separate process exists for *robustness* (a timeout can kill it, a crash cannot take
  the node down), not for *isolation*.

NEVER accept code from end users, tenants, dashboards, HTTP requests or any other untrusted
source. Whoever can register a ``python`` or ``js`` task can run anything on every node.

Handler config
--------------
``{"kind": "python" | "js", "code": str, "timeout": int}``

* ``code``: 1..100_000 characters. Python code must define a top-level ``def run(context):``
  (checked statically at registration). JavaScript code must define ``run`` as a top-level
  function, or export it through ``module.exports.run`` / ``module.exports = {run}`` /
  ``exports.run``; a missing ``run`` is only detected when the code runs. ``run`` may be
  ``async`` or return a Promise in JavaScript; in Python it must be a plain ``def``.
* ``timeout``: milliseconds, 1..86_400_000, default 30_000. It INCLUDES process start-up.

Syntax errors of both languages are refused at registration with :class:`JsCompileFailedError`
(``hai:scheduler:030``) naming the line; nothing is executed to find them (``compile()`` for
Python, ``node --check`` for JavaScript).

What ``run`` receives and what the attempt returns
--------------------------------------------------
``run(context)`` gets the :class:`ExecutionContext` as a plain JSON object: ``task_id``,
``occurrence_id``, ``execution_token``, ``sequence``, ``attempt``, ``trigger``, ``source``,
``scheduled_minute``, ``params``.

Outcome shapes (the contract tested in ``tests/integration/test_code_executor.py``):

* success, nothing printed: ``Outcome.result`` is exactly what ``run`` returned;
* success, something printed on stdout or stderr:
  ``Outcome.result == {"value": <run's return value>, "stdout": "...", "stderr": "..."}``;
* failure: ``Outcome.error`` is a one-line summary, then (for exceptions) a short traceback
  tail, then the captured ``--- stdout ---`` / ``--- stderr ---`` sections when non-empty.

Each captured stream keeps its first 64 KiB; a cut stream ends with ``[truncated: N bytes dropped]``.
The return value must be JSON: Python uses ``json.dumps(..., allow_nan=False)``; JavaScript uses
``JSON.stringify`` semantics (``undefined`` becomes ``null``, a ``BigInt`` fails the attempt).

The attempt ends when ``run`` returns (or its Promise settles): the child then exits at once
(Python uses ``os._exit``, so close your files inside ``run``), and anything the code left
running -- threads, timers, child processes in its process group -- is killed with the group.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from scheduler_core.errors import ConfigError, JsCompileFailedError
from scheduler_core.executors.base import CancelSignal, ExecutionContext, ExecutionRequest, Outcome, OutcomeStatus

MAX_CODE_CHARS = 100_000
DEFAULT_TIMEOUT_MS = 30_000
MAX_TIMEOUT_MS = 86_400_000
OUTPUT_LIMIT_BYTES = 64 * 1024  # kept per captured stream
RESULT_LIMIT_BYTES = 16 * 1024 * 1024  # a larger result is refused rather than held in memory
NODE_CHECK_TIMEOUT_S = 10.0
READER_GRACE_S = 2.0  # how long to wait for the pipes to drain once the process group is dead
CODE_FILENAME = "<task code>"
_SETTINGS = ("kind", "code", "timeout")

Ending = Literal["exited", "timeout", "cancelled"]

# The Python child. It reads {"code", "context"} on stdin and writes ONE JSON document on the
# result fd named by argv[1]. The result travels on its own pipe, not on stdout, so that
# whatever the user code prints (even a line that looks like a result) cannot corrupt it.
_PYTHON_BOOTSTRAP = r"""
import json, linecache, os, sys, traceback

FILENAME = "<task code>"


def _send(fd, document):
    with os.fdopen(fd, "wb") as channel:
        channel.write(json.dumps(document).encode("utf-8"))


def _failure(exc):
    # Drop the bootstrap's own frames: the first frame worth showing is the task code's.
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != FILENAME:
        tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb)
    return {"ok": False, "kind": "exception", "error": (type(exc).__name__ + ": " + str(exc)).strip(),
            "traceback": "".join(lines)}


def _main():
    fd = int(sys.argv[1])
    os.set_inheritable(fd, False)  # processes the code spawns must not hold the result pipe open
    payload = json.loads(sys.stdin.buffer.read())
    code = payload["code"]
    # Registering the source lets tracebacks show the offending lines of the task code.
    linecache.cache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)
    namespace = {"__name__": "__task__", "__builtins__": __builtins__}
    try:
        exec(compile(code, FILENAME, "exec"), namespace)
        run = namespace.get("run")
        if not callable(run):
            document = {"ok": False, "kind": "no_run", "error": "the code defines no run(context) function"}
        else:
            value = run(payload["context"])
            try:
                json.dumps(value, allow_nan=False)  # refuse here what the scheduler could not store
                document = {"ok": True, "value": value}
            except (TypeError, ValueError, RecursionError) as exc:
                document = {"ok": False, "kind": "not_json", "error": type(exc).__name__ + ": " + str(exc)}
    except Exception as exc:
        document = _failure(exc)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # os._exit below would drop buffered output
        except Exception:
            pass  # the code closed or replaced the stream: its output is its own business
    _send(fd, document)
    # The attempt is over once run() returned: do not wait for threads the code left behind.
    os._exit(0)


_main()
"""

# The JavaScript child: same protocol. `new Function` gives the code a CommonJS-like scope
# (module, exports, require, __filename, __dirname -- the same parameters `node --check`
# compiles a .cjs file with), so both `function run` and `module.exports.run` styles work.
_JS_BOOTSTRAP = r"""
'use strict';
const fs = require('fs');
const fd = Number(process.argv[1]);
const FILENAME = '<task code>';
const SOURCE_URL = 'hai-task-code';  // V8 ignores a sourceURL with spaces or brackets; renamed in stacks
const HEADER_LINES = 2;  // `new Function` puts two lines before the body

function send(document) {
  const buffer = Buffer.from(JSON.stringify(document), 'utf8');
  let offset = 0;
  while (offset < buffer.length) offset += fs.writeSync(fd, buffer, offset, buffer.length - offset);
  fs.closeSync(fd);
  process.exit(0);  // the attempt is over: timers and handles the code left behind do not matter
}

function describe(error) {
  if (!(error instanceof Error)) return { message: 'thrown value: ' + String(error), stack: '' };
  // Keep only the task code's frames, with line numbers relative to the code as written.
  const stack = String(error.stack || '').split('\n')
    .filter((line) => line.trim().startsWith('at ') && !line.includes('[eval]') && !line.includes('node:internal'))
    .map((line) => line.replace(new RegExp(SOURCE_URL + ':(\\d+):(\\d+)', 'g'),
      (_, row, col) => FILENAME + ':' + (Number(row) - HEADER_LINES) + ':' + col))
    .join('\n');
  return { message: error.name + ': ' + error.message, stack };
}

function fail(error) {
  const { message, stack } = describe(error);
  send({ ok: false, kind: 'exception', error: message, traceback: stack });
}

function succeed(value) {
  let text;
  try {
    text = JSON.stringify(value === undefined ? null : value);
  } catch (error) {
    send({ ok: false, kind: 'not_json', error: describe(error).message });
    return;
  }
  send({ ok: true, value: JSON.parse(text === undefined ? 'null' : text) });
}

function main() {
  const payload = JSON.parse(fs.readFileSync(0, 'utf8'));
  const module = { exports: {} };
  const exportsObject = module.exports;
  let run;
  try {
    const body = payload.code + '\n;return typeof run === "function" ? run : undefined;\n//# sourceURL=' + SOURCE_URL;
    const factory = new Function('module', 'exports', 'require', '__filename', '__dirname', body);
    const declared = factory(module, exportsObject, require, FILENAME, process.cwd());
    const exported = module.exports && module.exports.run;
    run = [exported, exportsObject.run, declared].find((candidate) => typeof candidate === 'function');
  } catch (error) {
    fail(error);
    return;
  }
  if (run === undefined) {
    send({ ok: false, kind: 'no_run', error: 'the code defines no run(context) function' });
    return;
  }
  let pending;
  try {
    pending = Promise.resolve(run(payload.context));
  } catch (error) {
    fail(error);
    return;
  }
  pending.then(succeed, fail);
}

main();
"""


# --- configuration ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Settings:
    code: str
    timeout_ms: int


def _parse_settings(config: Mapping[str, Any], kind: str) -> _Settings:
    """Check the fields (not the syntax): shared by validate and, defensively, execute."""
    for key in config:
        if key not in _SETTINGS:
            raise ConfigError(f"handler.{key}", f"is not a {kind} handler setting (use code, timeout)")
    if config.get("kind") != kind:
        raise ConfigError("handler.kind", f"must be {kind!r}")
    code = config.get("code")
    if not isinstance(code, str) or not code.strip():
        raise ConfigError("handler.code", "must be a non-empty string")
    if len(code) > MAX_CODE_CHARS:
        raise ConfigError("handler.code", f"must be at most {MAX_CODE_CHARS} characters (got {len(code)})")
    if "\0" in code:
        raise ConfigError("handler.code", "must not contain NUL characters")
    timeout = config.get("timeout", DEFAULT_TIMEOUT_MS)
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= MAX_TIMEOUT_MS:
        raise ConfigError("handler.timeout", f"must be an integer number of ms between 1 and {MAX_TIMEOUT_MS} "
                                             f"(got {timeout!r})")
    return _Settings(code, timeout)


def _check_python_syntax(code: str) -> None:
    try:
        compile(code, CODE_FILENAME, "exec")  # compiles only: nothing in the code is executed
    except SyntaxError as exc:
        where = f"line {exc.lineno}" if exc.lineno else "an unknown line"
        text = f": {exc.text.strip()}" if exc.text and exc.text.strip() else ""
        raise JsCompileFailedError(f"handler.code: Python syntax error on {where}: {exc.msg}{text}",
                                   field="handler.code", language="python", line=exc.lineno) from exc
    except (ValueError, RecursionError, MemoryError) as exc:
        raise JsCompileFailedError(f"handler.code: the Python code cannot be compiled: {exc}",
                                   field="handler.code", language="python", line=None) from exc


def _accepts_one_argument(args: ast.arguments) -> bool:
    positional = len(args.posonlyargs) + len(args.args)
    required = positional - len(args.defaults)
    required_keywords = sum(1 for default in args.kw_defaults if default is None)
    return required <= 1 and (positional >= 1 or args.vararg is not None) and required_keywords == 0


def _check_python_run(code: str) -> None:
    """The code must define a plain top-level ``def run(context)``; ``ast`` reads it without running it."""
    definitions = [node for node in ast.parse(code, CODE_FILENAME).body
                   if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "run"]
    if not definitions:
        raise ConfigError("handler.code", "must define a top-level function `def run(context):`")
    last = definitions[-1]  # a later definition replaces an earlier one, as Python would
    if isinstance(last, ast.AsyncFunctionDef):
        raise ConfigError("handler.code", "run must be a plain `def run(context):`, not `async def`")
    if not _accepts_one_argument(last.args):
        raise ConfigError("handler.code", "run must accept exactly one argument: `def run(context):`")


_NODE_LOCATION = re.compile(r"^(?P<path>.+?):(?P<line>\d+)$")


def _node_error(output: str, path: str) -> tuple[int | None, str]:
    """The line number and the first meaningful lines of a ``node --check`` failure."""
    lines = [line.rstrip() for line in output.replace(path, CODE_FILENAME).splitlines()]
    line_number: int | None = None
    if lines and (match := _NODE_LOCATION.match(lines[0])):
        line_number = int(match.group("line"))
    kept = [line for line in lines if line.strip() and not line.lstrip().startswith("at ")
            and not line.startswith("Node.js v")]
    return line_number, "\n".join(kept[:6])


def _check_js_syntax(node: str, code: str) -> None:
    with tempfile.TemporaryDirectory(prefix="hai-js-check-") as folder:
        # .cjs: always checked as CommonJS, whatever a package.json above the temp folder says.
        path = os.path.join(folder, "task.cjs")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(code)
        try:
            checked = subprocess.run([node, "--check", path], capture_output=True, text=True, errors="replace",
                                     timeout=NODE_CHECK_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired as exc:
            raise JsCompileFailedError(f"handler.code: `node --check` did not finish within "
                                       f"{NODE_CHECK_TIMEOUT_S:g} s", field="handler.code",
                                       language="js", line=None) from exc
        if checked.returncode != 0:
            line, detail = _node_error(checked.stderr or checked.stdout, path)
            where = f"line {line}" if line is not None else "an unknown line"
            raise JsCompileFailedError(f"handler.code: JavaScript syntax error on {where}:\n{detail}",
                                       field="handler.code", language="js", line=line)


# --- the child process ---------------------------------------------------------------------


class _PipeReader:
    """Drains one pipe in a daemon thread, keeping at most ``limit`` bytes.

    Reading in a thread matters: a child that fills a 64 KiB pipe buffer nobody reads would
    block forever in write() and turn every chatty task into a timeout. The thread owns the fd
    and closes it at EOF; if a process that escaped the group keeps the pipe open, the thread
    is simply abandoned (daemon) and we use what was read so far.
    """

    def __init__(self, fd: int, limit: int, name: str) -> None:
        self._fd = fd
        self._limit = limit
        self._chunks: list[bytes] = []
        self._kept = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._drain, name=name, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        try:
            while chunk := os.read(self._fd, 65536):
                room = max(0, self._limit - self._kept)
                if room:
                    self._chunks.append(chunk[:room])
                    self._kept += min(room, len(chunk))
                self.dropped += max(0, len(chunk) - room)
        except OSError:
            pass  # nothing more can be read; what we have is all there is
        finally:
            os.close(self._fd)

    def join(self, deadline: float) -> bool:
        self._thread.join(max(0.0, deadline - time.monotonic()))
        return not self._thread.is_alive()

    def data(self) -> bytes:
        return b"".join(list(self._chunks))

    def text(self) -> str:
        text = self.data().decode("utf-8", errors="replace")
        return f"{text}\n[truncated: {self.dropped} bytes dropped]" if self.dropped else text


def _feed(fd: int, data: bytes) -> None:
    """Write the payload to the child's stdin (in a thread: it may exceed the pipe buffer)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        pass  # the child exited or closed stdin: it no longer needs the payload
    finally:
        os.close(fd)


def _has_exited(pid: int) -> bool:
    """True once the child has exited, WITHOUT reaping it (WNOWAIT).

    Keeping the exited child as an unreaped zombie keeps its pid -- which is also its process
    group id -- reserved, so the killpg that follows cannot hit an unrelated, recycled group.
    """
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # someone else reaped it


def _wait_for_exit(pid: int, deadline: float, cancel: CancelSignal) -> Ending:
    """Poll for the child's exit until the deadline or cancellation, whichever comes first."""
    interval = 0.001  # short first polls keep quick tasks quick; capped to stay cheap for long ones
    while True:
        if _has_exited(pid):
            return "exited"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout"
        if cancel.wait(min(interval, remaining)):
            return "cancelled"
        interval = min(interval * 2, 0.05)


def _kill_group(pid: int) -> None:
    """SIGKILL the child's whole process group: the child and everything it spawned."""
    # An already empty group is fine (macOS answers EPERM rather than ESRCH for a zombie-only group).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _close_all(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


@dataclass(frozen=True)
class _Finished:
    """What an attempt's child process left behind."""

    ending: Ending
    returncode: int
    result: bytes
    result_too_large: bool
    stdout: str
    stderr: str


def _run_child(command: list[str], payload: bytes, deadline: float, cancel: CancelSignal) -> _Finished:
    """Start the child, wait for its end, kill its group and reap it; never returns with it alive."""
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    result_r, result_w = os.pipe()
    try:
        # start_new_session: the child leads a new process group, so one killpg reaches every
        # process the code starts (a shell, `sleep 60`, ...) and not the scheduler itself.
        process = subprocess.Popen([*command, str(result_w)], stdin=stdin_r, stdout=stdout_w, stderr=stderr_w,
                                   pass_fds=(result_w,), start_new_session=True)
    except BaseException:
        _close_all(stdin_r, stdin_w, stdout_r, stdout_w, stderr_r, stderr_w, result_r, result_w)
        raise
    # The parent must drop its copies of the child's ends, or the readers would never see EOF.
    _close_all(stdin_r, stdout_w, stderr_w, result_w)
    writer = threading.Thread(target=_feed, args=(stdin_w, payload), name="code-stdin", daemon=True)
    writer.start()
    stdout = _PipeReader(stdout_r, OUTPUT_LIMIT_BYTES, "code-stdout")
    stderr = _PipeReader(stderr_r, OUTPUT_LIMIT_BYTES, "code-stderr")
    result = _PipeReader(result_r, RESULT_LIMIT_BYTES, "code-result")
    try:
        ending = _wait_for_exit(process.pid, deadline, cancel)
    finally:
        # Kill first, reap second: while the exited leader is unreaped its pid (= the group id)
        # cannot be recycled, so the kill is safe; then wait() collects it so no zombie remains.
        _kill_group(process.pid)
        process.wait()  # SIGKILL cannot be caught or ignored: this returns promptly
    grace = time.monotonic() + READER_GRACE_S
    writer.join(max(0.0, grace - time.monotonic()))
    for reader in (result, stdout, stderr):
        reader.join(grace)
    return _Finished(ending, process.returncode, result.data(), result.dropped > 0, stdout.text(), stderr.text())


# --- outcomes ------------------------------------------------------------------------------


def _context_json(context: ExecutionContext) -> dict[str, Any]:
    return {"task_id": context.task_id, "occurrence_id": context.occurrence_id,
            "execution_token": context.execution_token, "sequence": context.sequence, "attempt": context.attempt,
            "trigger": context.trigger, "source": context.source, "scheduled_minute": context.scheduled_minute,
            "params": dict(context.params)}


def _with_output(summary: str, finished: _Finished) -> str:
    parts = [summary]
    if finished.stdout:
        parts.append(f"--- stdout ---\n{finished.stdout}")
    if finished.stderr:
        parts.append(f"--- stderr ---\n{finished.stderr}")
    return "\n".join(parts)


def _traceback_tail(traceback: str, max_lines: int = 20) -> str:
    lines = traceback.rstrip().splitlines()
    return "\n".join(lines[-max_lines:])


def _exit_summary(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the process was killed by {name} before run() returned a result"
    if returncode == 0:  # e.g. os._exit(0), process.exit(), or a JavaScript Promise that never settles
        return "the process exited with code 0 before run() returned a result (an early exit, or a Promise " \
               "that never settled)"
    return f"the process exited with code {returncode} before run() returned a result"


def _success(value: Any, finished: _Finished) -> Outcome:
    if not finished.stdout and not finished.stderr:
        return Outcome("success", result=value)
    return Outcome("success", result={"value": value, "stdout": finished.stdout, "stderr": finished.stderr})


def _from_document(finished: _Finished) -> Outcome:
    """Turn the child's result document (or its absence) into an outcome."""
    if finished.result_too_large:
        return Outcome("failed", error=_with_output(f"the result of run() is larger than {RESULT_LIMIT_BYTES} bytes",
                                                    finished))
    if not finished.result:
        return Outcome("failed", error=_with_output(_exit_summary(finished.returncode), finished))
    try:
        document = json.loads(finished.result)
        ok, kind = bool(document["ok"]), document.get("kind")
    except (ValueError, KeyError, TypeError, AttributeError):
        return Outcome("failed", error=_with_output("the result channel carried malformed data", finished))
    if ok:
        return _success(document.get("value"), finished)
    error = str(document.get("error", "unknown error"))
    if kind == "not_json":
        error = f"the result of run() is not JSON: {error}"
    elif document.get("traceback"):
        error = f"{error}\n{_traceback_tail(str(document['traceback']))}"
    return Outcome("failed", error=_with_output(error, finished))


def _uncertain(request: ExecutionRequest) -> OutcomeStatus:
    """A killed attempt may have had effects: only an idempotent task can call it a plain failure."""
    return "failed" if getattr(request.task, "idempotent", False) else "unknown"


# --- the executors -------------------------------------------------------------------------


class _CodeExecutor:
    """One implementation for both languages; subclasses say how to check and start the code."""

    kind = ""
    language = ""

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        settings = _parse_settings(config, self.kind)
        self._check_code(settings.code)
        return {"kind": self.kind, "code": settings.code, "timeout": settings.timeout_ms}

    def execute(self, request: ExecutionRequest) -> Outcome:
        started = time.monotonic()  # the timeout covers everything from here, process start-up included
        if request.signal.is_set():
            return Outcome("interrupted", error=f"cancelled before the process started: {request.signal.reason}")
        try:
            settings = _parse_settings(request.handler, self.kind)
            command = self._command()
        except ConfigError as exc:  # a handler stored by an older version, or `node` gone since registration
            return Outcome("failed", error=f"cannot run the {self.language} task: {exc.message}")
        try:
            payload = json.dumps({"code": settings.code, "context": _context_json(request.context)}).encode()
        except (TypeError, ValueError) as exc:
            return Outcome("failed", error=f"the execution context is not JSON: {exc}")
        deadline = started + settings.timeout_ms / 1000
        try:
            finished = _run_child(command, payload, deadline, request.signal)
        except OSError as exc:
            return Outcome("failed", error=f"could not start the {self.language} process: {exc}")
        if finished.ending == "timeout":
            return Outcome(_uncertain(request), error=_with_output(
                f"timeout after {settings.timeout_ms} ms (process killed)", finished))
        if finished.ending == "cancelled":
            return Outcome(_uncertain(request), error=_with_output(
                f"cancelled: {request.signal.reason} (process killed)", finished))
        return _from_document(finished)

    def _check_code(self, code: str) -> None:
        raise NotImplementedError

    def _command(self) -> list[str]:
        """The child's command line; the result fd number is appended as its last argument."""
        raise NotImplementedError


class PythonCodeExecutor(_CodeExecutor):
    """``kind: python``: TRUSTED code only -- see the module docstring. Not a sandbox."""

    kind = "python"
    language = "Python"

    def _check_code(self, code: str) -> None:
        _check_python_syntax(code)
        _check_python_run(code)

    def _command(self) -> list[str]:
        # The same interpreter as the node, so the code sees the same installed packages.
        # -I: ignore PYTHON* variables and the user site, keep the cwd off sys.path.
        # -X utf8: stdio is UTF-8 whatever the locale, matching how the output is decoded.
        return [sys.executable, "-I", "-X", "utf8", "-c", _PYTHON_BOOTSTRAP]


def _find_node() -> str:
    node = shutil.which("node")
    if node is None:
        raise ConfigError("handler.kind", "JavaScript tasks need Node.js (`node`) on PATH")
    return node


class JavaScriptCodeExecutor(_CodeExecutor):
    """``kind: js``: TRUSTED code only -- see the module docstring. Not a sandbox. Needs ``node`` on PATH."""

    kind = "js"
    language = "JavaScript"

    def _check_code(self, code: str) -> None:
        _check_js_syntax(_find_node(), code)

    def _command(self) -> list[str]:
        # `--` ends node's options: the result fd number that follows is for the bootstrap.
        return [_find_node(), "-e", _JS_BOOTSTRAP, "--"]


__all__ = ["DEFAULT_TIMEOUT_MS", "MAX_CODE_CHARS", "MAX_TIMEOUT_MS", "OUTPUT_LIMIT_BYTES", "JavaScriptCodeExecutor",
           "PythonCodeExecutor"]
