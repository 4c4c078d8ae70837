"""``kind: python`` and ``kind: js``: run a snippet of code in a child process, one process per attempt.

SECURITY WARNING: THIS IS NOT A SANDBOX. The code is TRUSTED, server-side code of the application's
operators and runs with the node's full privileges; never accept it from end users. Config, outcome
shapes and the process lifecycle: docs/executors-and-providers.md.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler_core.errors import ConfigError, JsCompileFailedError
from scheduler_core.executors.base import ExecutionContext, ExecutionRequest, Outcome
from scheduler_core.executors.code_bootstrap import JS_BOOTSTRAP, PYTHON_BOOTSTRAP
from scheduler_core.executors.worker_process import OUTPUT_LIMIT_BYTES, RESULT_LIMIT_BYTES, Finished, run_child
from scheduler_core.statuses import AttemptStatus
from scheduler_core.validation import check_int, check_text

MAX_CODE_CHARS = 100_000
DEFAULT_TIMEOUT_MS = 30_000
MAX_TIMEOUT_MS = 86_400_000
NODE_CHECK_TIMEOUT_S = 10.0
CODE_FILENAME = "<task code>"
_SETTINGS = ("kind", "code", "timeout")


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
    code = check_text(config.get("code"), "handler.code", MAX_CODE_CHARS)
    return _Settings(code, check_int(config.get("timeout", DEFAULT_TIMEOUT_MS), "handler.timeout", 1, MAX_TIMEOUT_MS))


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


# --- outcomes ------------------------------------------------------------------------------


def _context_json(context: ExecutionContext) -> dict[str, Any]:
    return {"task_id": context.task_id, "occurrence_id": context.occurrence_id,
            "execution_token": context.execution_token, "sequence": context.sequence, "attempt": context.attempt,
            "trigger": context.trigger, "source": context.source, "scheduled_minute": context.scheduled_minute,
            "params": dict(context.params)}


def _with_output(summary: str, finished: Finished) -> str:
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


def _success(value: Any, finished: Finished) -> Outcome:
    if not finished.stdout and not finished.stderr:
        return Outcome(AttemptStatus.SUCCESS, result=value)
    return Outcome(AttemptStatus.SUCCESS, result={"value": value, "stdout": finished.stdout, "stderr": finished.stderr})


def _from_document(finished: Finished) -> Outcome:
    """Turn the child's result document (or its absence) into an outcome."""
    if finished.result_too_large:
        return Outcome(AttemptStatus.FAILED, error=_with_output(
            f"the result of run() is larger than {RESULT_LIMIT_BYTES} bytes", finished))
    if not finished.result:
        return Outcome(AttemptStatus.FAILED, error=_with_output(_exit_summary(finished.returncode), finished))
    try:
        document = json.loads(finished.result)
        ok, kind = bool(document["ok"]), document.get("kind")
    except (ValueError, KeyError, TypeError, AttributeError):
        return Outcome(AttemptStatus.FAILED, error=_with_output("the result channel carried malformed data", finished))
    if ok:
        return _success(document.get("value"), finished)
    error = str(document.get("error", "unknown error"))
    if kind == "not_json":
        error = f"the result of run() is not JSON: {error}"
    elif document.get("traceback"):
        error = f"{error}\n{_traceback_tail(str(document['traceback']))}"
    return Outcome(AttemptStatus.FAILED, error=_with_output(error, finished))


def _uncertain(request: ExecutionRequest) -> AttemptStatus:
    """A killed attempt may have had effects: only an idempotent task can call it a plain failure."""
    return AttemptStatus.FAILED if getattr(request.task, "idempotent", False) else AttemptStatus.UNKNOWN


# --- the executors -------------------------------------------------------------------------


class _CodeExecutor(ABC):
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
            return Outcome(AttemptStatus.INTERRUPTED,
                           error=f"cancelled before the process started: {request.signal.reason}")
        try:
            settings = _parse_settings(request.handler, self.kind)
            command = self._command()
        except ConfigError as exc:  # a handler stored by an older version, or `node` gone since registration
            return Outcome(AttemptStatus.FAILED, error=f"cannot run the {self.language} task: {exc.message}")
        try:
            payload = json.dumps({"code": settings.code, "context": _context_json(request.context)}).encode()
        except (TypeError, ValueError) as exc:
            return Outcome(AttemptStatus.FAILED, error=f"the execution context is not JSON: {exc}")
        deadline = started + settings.timeout_ms / 1000
        try:
            finished = run_child(command, payload, deadline, request.signal)
        except OSError as exc:
            return Outcome(AttemptStatus.FAILED, error=f"could not start the {self.language} process: {exc}")
        if finished.ending == "timeout":
            return Outcome(_uncertain(request), error=_with_output(
                f"timeout after {settings.timeout_ms} ms (process killed)", finished))
        if finished.ending == "cancelled":
            return Outcome(_uncertain(request), error=_with_output(
                f"cancelled: {request.signal.reason} (process killed)", finished))
        return _from_document(finished)

    @abstractmethod
    def _check_code(self, code: str) -> None:
        """Refuse code that cannot run (syntax, no run function) without running it."""

    @abstractmethod
    def _command(self) -> list[str]:
        """The child's command line; the result fd number is appended as its last argument."""


class PythonCodeExecutor(_CodeExecutor):
    """``kind: python``: TRUSTED code only. Not a sandbox (docs/executors-and-providers.md)."""

    kind = "python"
    language = "Python"

    def _check_code(self, code: str) -> None:
        _check_python_syntax(code)
        _check_python_run(code)

    def _command(self) -> list[str]:
        # The same interpreter as the node, so the code sees the same installed packages.
        # -I: ignore PYTHON* variables and the user site, keep the cwd off sys.path.
        # -X utf8: stdio is UTF-8 whatever the locale, matching how the output is decoded.
        return [sys.executable, "-I", "-X", "utf8", "-c", PYTHON_BOOTSTRAP]


def _find_node() -> str:
    node = shutil.which("node")
    if node is None:
        raise ConfigError("handler.kind", "JavaScript tasks need Node.js (`node`) on PATH")
    return node


class JavaScriptCodeExecutor(_CodeExecutor):
    """``kind: js``: TRUSTED code only. Not a sandbox (docs/executors-and-providers.md). Needs ``node`` on PATH."""

    kind = "js"
    language = "JavaScript"

    @staticmethod
    def available() -> bool:
        """Whether this host can run JavaScript tasks (a node claims js occurrences only then)."""
        return shutil.which("node") is not None

    def _check_code(self, code: str) -> None:
        _check_js_syntax(_find_node(), code)

    def _command(self) -> list[str]:
        # `--` ends node's options: the result fd number that follows is for the bootstrap.
        return [_find_node(), "-e", JS_BOOTSTRAP, "--"]


__all__ = ["DEFAULT_TIMEOUT_MS", "MAX_CODE_CHARS", "MAX_TIMEOUT_MS", "OUTPUT_LIMIT_BYTES", "JavaScriptCodeExecutor",
           "PythonCodeExecutor"]
