"""``kind: command``: run one program directly (no shell, ever) as a child of the node, one per attempt.

SECURITY WARNING: THIS IS NOT A SANDBOX. The program is TRUSTED, chosen by the application's
operators, and runs with the node's privileges; never accept it from end users (the dashboard and
the API refuse it). It gets a minimal environment (PATH, LANG, HOME, the handler's ``env`` and the
occurrence's SCHEDULER_* variables), not the node's. A small supervisor (``SUPERVISOR``, the
node's Python) leads the attempt's process group: it starts the program, reports how it ended,
and stops the group if the node dies.
Settings, outcomes and the process lifecycle: docs/executors-and-providers.md §3.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from scheduler_core.errors import ConfigError
from scheduler_core.executors.base import ExecutionContext, ExecutionRequest, Outcome
from scheduler_core.executors.worker_process import Finished, run_child
from scheduler_core.masking import MASK, is_secret_name
from scheduler_core.statuses import AttemptStatus
from scheduler_core.validation import check_int, check_text, shown

DEFAULT_TIMEOUT_MS = 30_000
MAX_TIMEOUT_MS = 86_400_000
DEFAULT_MAX_OUTPUT_BYTES = 65_536  # kept per stream: its first half and its last half
MAX_OUTPUT_BYTES = 1_048_576
MAX_ARGS = 256
MAX_ARG_CHARS = 4096
MAX_ARGV_CHARS = 65_536
MAX_ENV = 64
MAX_ENV_NAME_CHARS = 128
MAX_ENV_VALUE_CHARS = 4096
MAX_PATH_CHARS = 4096
DEFAULT_CWD = "/"
TERM_GRACE_S = 5.0  # between SIGTERM and SIGKILL, at a timeout, a cancellation or the node's death
INHERITED = ("PATH", "LANG", "HOME")  # all a program gets of the node's environment
ERROR_TAIL_LINES = 20
ERROR_TAIL_CHARS = 2000
MIN_MASKED_CHARS = 4  # a shorter secret value is not replaced in output: it would mask ordinary text
_SETTINGS = ("kind", "argv", "cwd", "env", "timeout", "max_output_bytes")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# The supervisor: the process group's leader, run by the node's Python (-I -S: nothing of the
# environment or site-packages). It reads one JSON line {"argv", "env", "cwd", "grace_s"} on stdin
# and keeps stdin open as the node's lifeline; forks the program (stdin /dev/null, the signals
# Python ignores restored); writes ONE JSON line on the report fd named by argv[1]: {"ran": false,
# "stage", "errno", "error"} when it could not start, else {"ran": true, "returncode"} (negative:
# the signal that ended it); then kills what is left of the group, itself included. A SIGTERM to
# the group is for the program: the supervisor ignores it. stdin at end-of-file means the node is
# gone: SIGTERM to the group, then SIGKILL after the grace.
SUPERVISOR = r"""
import json, os, signal, sys, threading, time


def _report(fd, document):
    try:
        os.write(fd, (json.dumps(document) + "\n").encode())
    except OSError:
        pass  # the node is gone: nobody reads the report


def _watch_the_node(grace_s):
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    os.killpg(0, signal.SIGTERM)
    time.sleep(grace_s)
    os.killpg(0, signal.SIGKILL)


def _become_the_program(spec, failure_w):
    stage = "cwd"
    try:
        os.chdir(spec["cwd"])
        stage = "exec"
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for name in ("SIGPIPE", "SIGXFSZ", "SIGTERM"):
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        argv = spec["argv"]
        if "/" in argv[0]:
            os.execve(argv[0], argv, spec["env"])
        os.execvpe(argv[0], argv, spec["env"])
    except OSError as exc:
        os.write(failure_w, json.dumps({"stage": stage, "errno": exc.errno, "error": exc.strerror}).encode())
    except BaseException as exc:
        os.write(failure_w, json.dumps({"stage": stage, "errno": None, "error": repr(exc)}).encode())
    finally:
        os._exit(127)


def _main():
    report_fd = int(sys.argv[1])
    os.set_inheritable(report_fd, False)
    received = b""
    while not received.endswith(b"\n"):
        chunk = os.read(0, 65536)
        if not chunk:
            return  # the node went away before it said what to run: nothing ran
        received += chunk
    spec = json.loads(received)
    signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        failure_r, failure_w = os.pipe()
        pid = os.fork()
    except OSError as exc:  # no process could be made (EAGAIN, EMFILE, ENOMEM): nothing ran
        _report(report_fd, {"ran": False, "stage": "fork", "errno": exc.errno, "error": exc.strerror})
        return
    if pid == 0:
        os.close(failure_r)
        _become_the_program(spec, failure_w)
    os.close(failure_w)
    failure = b""
    while chunk := os.read(failure_r, 4096):
        failure += chunk
    os.close(failure_r)
    if failure:
        os.waitpid(pid, 0)
        _report(report_fd, dict(json.loads(failure), ran=False))
        return
    threading.Thread(target=_watch_the_node, args=(spec["grace_s"],), daemon=True).start()
    _, status = os.waitpid(pid, 0)
    _report(report_fd, {"ran": True, "returncode": os.waitstatus_to_exitcode(status)})
    os.killpg(0, signal.SIGKILL)


_main()
"""


# --- configuration ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Settings:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    timeout_ms: int
    max_output_bytes: int


def child_environment(env: Mapping[str, str], node: Mapping[str, str] | None = None) -> dict[str, str]:
    """The program's whole environment: PATH, LANG and HOME of the node (``os.environ``), then ``env``."""
    node = os.environ if node is None else node
    inherited = {name: node[name] for name in INHERITED if name in node}
    inherited.setdefault("PATH", os.defpath)
    return {**inherited, **env}


def context_variables(context: ExecutionContext) -> dict[str, str]:
    """What the program knows of its occurrence; SCHEDULER_OCCURRENCE_ID is the idempotency key (stable
    across retries and takeovers). They replace a handler ``env`` entry of the same name."""
    return {"SCHEDULER_TASK_ID": context.task_id, "SCHEDULER_OCCURRENCE_ID": context.occurrence_id,
            "SCHEDULER_ATTEMPT": str(context.attempt)}


def _check_env(value: Any) -> dict[str, str]:
    """Variable names and string values; a message never quotes a value (it may be a secret)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError("handler.env", f"must be a mapping of variable names to strings (got {type(value).__name__})")
    if len(value) > MAX_ENV:
        raise ConfigError("handler.env", f"must hold at most {MAX_ENV} variables (got {len(value)})")
    for name, text in value.items():
        field = f"handler.env.{name}"
        if not isinstance(name, str) or len(name) > MAX_ENV_NAME_CHARS or not _ENV_NAME.fullmatch(name):
            raise ConfigError(field, f"is not a variable name: letters, digits and _, not starting with a digit, "
                                     f"at most {MAX_ENV_NAME_CHARS} characters")
        if not isinstance(text, str):
            raise ConfigError(field, f"must be a string (got {type(text).__name__})")
        if len(text) > MAX_ENV_VALUE_CHARS:
            raise ConfigError(field, f"must be at most {MAX_ENV_VALUE_CHARS} characters (got {len(text)})")
        check_text(text, field, MAX_ENV_VALUE_CHARS, blank=True)
    return dict(value)


def _program(name: str, path: str, resolve: bool) -> str:
    """An absolute path as given; a bare name looked up on ``path`` (its absolute entries) when resolving."""
    if os.path.isabs(name):
        return name
    if "/" in name:
        raise ConfigError("handler.argv[0]", "must be an absolute path (/usr/bin/pg_dump) or a program name found "
                                             "on PATH: a relative path would depend on the working directory")
    if not resolve:
        return name
    found = shutil.which(name, path=os.pathsep.join(entry for entry in path.split(os.pathsep) if os.path.isabs(entry)))
    if found is None:
        raise ConfigError("handler.argv[0]", f"{shown(name)} is not found on PATH; give the program's absolute path")
    return found


def _check_argv(value: Any, path: str, resolve: bool) -> list[str]:
    if value is None:
        raise ConfigError("handler.argv", 'is required: the program and its arguments, e.g. ["/usr/bin/pg_dump", '
                                          '"app"]')
    if isinstance(value, str):
        raise ConfigError("handler.argv", "must be a list of strings, the program first: a string is not split "
                                          "into words (there is no shell)")
    if not isinstance(value, list | tuple):
        raise ConfigError("handler.argv", f"must be a list of strings, the program first (got {type(value).__name__})")
    if not value:
        raise ConfigError("handler.argv", "must name the program: at least one item")
    if len(value) > MAX_ARGS:
        raise ConfigError("handler.argv", f"must have at most {MAX_ARGS} items (got {len(value)})")
    argv = [check_text(item, f"handler.argv[{index}]", MAX_ARG_CHARS, blank=index > 0)
            for index, item in enumerate(value)]
    total = sum(len(item) for item in argv)
    if total > MAX_ARGV_CHARS:
        raise ConfigError("handler.argv", f"must be at most {MAX_ARGV_CHARS} characters in all (got {total})")
    return [_program(argv[0], path, resolve), *argv[1:]]


def _check_cwd(value: Any) -> str:
    if value is None:
        return DEFAULT_CWD
    cwd = check_text(value, "handler.cwd", MAX_PATH_CHARS, single_line=True)
    if not os.path.isabs(cwd):
        raise ConfigError("handler.cwd", "must be an absolute path")
    return cwd


def _parse(config: Mapping[str, Any], resolve: bool) -> _Settings:
    """Check every field; ``resolve`` looks a bare program name up on PATH (validation, not a run)."""
    if not isinstance(config, Mapping):
        raise ConfigError("handler", "must be a mapping with a 'kind'")
    for key in config:
        if key not in _SETTINGS:
            raise ConfigError(f"handler.{key}", "is not a command handler setting (use argv, cwd, env, timeout, "
                                                "max_output_bytes)")
    if config.get("kind") != "command":
        raise ConfigError("handler.kind", f"must be 'command' (got {shown(config.get('kind'))})")
    env = _check_env(config.get("env"))
    argv = _check_argv(config.get("argv"), child_environment(env)["PATH"], resolve)
    return _Settings(argv, env, _check_cwd(config.get("cwd")),
                     check_int(config.get("timeout", DEFAULT_TIMEOUT_MS), "handler.timeout", 1, MAX_TIMEOUT_MS),
                     check_int(config.get("max_output_bytes", DEFAULT_MAX_OUTPUT_BYTES), "handler.max_output_bytes",
                               1, MAX_OUTPUT_BYTES))


# --- outcomes ------------------------------------------------------------------------------


def _secrets(settings: _Settings) -> list[str]:
    """Values never to store: the handler's secret-named env values and URL passwords, longest first."""
    found = {text for name, text in settings.env.items() if is_secret_name(name)}
    for text in [*settings.argv, *settings.env.values()]:
        if "://" in text:
            try:
                password = urlsplit(text).password
            except ValueError:
                continue
            if password:
                found.add(password)
    return sorted((text for text in found if len(text) >= MIN_MASKED_CHARS), key=len, reverse=True)


def _masked(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _report(finished: Finished) -> dict[str, Any] | None:
    """The supervisor's report, or None when it ended without one."""
    try:
        report = json.loads(finished.result.decode("utf-8", errors="replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return report if isinstance(report, dict) and isinstance(report.get("ran"), bool) else None


def _with_stderr(summary: str, stderr: str) -> str:
    """The summary, then the end of stderr (its last lines), where the reason usually is."""
    if not stderr.strip():
        return summary
    tail = "".join(stderr.splitlines(keepends=True)[-ERROR_TAIL_LINES:])[-ERROR_TAIL_CHARS:]
    return f"{summary}\n--- end of stderr ---\n{tail}"


def _result(returncode: int | None, stdout: str, stderr: str) -> dict[str, Any]:
    result: dict[str, Any] = {"exit_code": returncode if returncode is not None and returncode >= 0 else None}
    if returncode is not None and returncode < 0:
        result["signal"] = _signal_name(-returncode)
    return {**result, "stdout": stdout, "stderr": stderr}


def _uncertain(request: ExecutionRequest) -> AttemptStatus:
    """The program may have had effects: only an idempotent task can call it a plain failure (and retry)."""
    return AttemptStatus.FAILED if getattr(request.task, "idempotent", False) else AttemptStatus.UNKNOWN


def _not_started(report: Mapping[str, Any], settings: _Settings) -> Outcome:
    what = f"change to handler.cwd {settings.cwd}" if report.get("stage") == "cwd" else f"start {settings.argv[0]}"
    return Outcome(AttemptStatus.FAILED,
                   error=f"could not {what}: {report.get('error')} (errno {report.get('errno')}); nothing ran")


def _judge(finished: Finished, settings: _Settings, request: ExecutionRequest) -> Outcome:
    secrets = _secrets(settings)
    stdout, stderr = _masked(finished.stdout, secrets), _masked(finished.stderr, secrets)
    report = _report(finished)
    if report is not None and report["ran"] is False:
        return _not_started(report, settings)
    returncode = report.get("returncode") if report is not None else None
    returncode = returncode if isinstance(returncode, int) else None
    result = _result(returncode, stdout, stderr)
    if finished.ending != "exited":
        how = (f"killed with SIGKILL {TERM_GRACE_S:g} s after SIGTERM" if finished.killed_after_grace
               else "stopped by SIGTERM")
        why = (f"timeout after {settings.timeout_ms} ms" if finished.ending == "timeout"
               else f"cancelled: {request.signal.reason}")
        return Outcome(_uncertain(request), result, _with_stderr(f"{why}; the process group was {how}", stderr))
    if returncode is None:  # the supervisor was killed from outside, or broke: the program may have run
        return Outcome(_uncertain(request), result, _with_stderr(
            f"the command's supervisor ended without a report (exit {finished.returncode}); the program may have run",
            stderr))
    if returncode < 0:
        return Outcome(_uncertain(request), result, _with_stderr(
            f"killed by {_signal_name(-returncode)} (signal {-returncode}) before it exited", stderr))
    if returncode > 0:
        return Outcome(AttemptStatus.FAILED, result, _with_stderr(f"exit status {returncode}", stderr))
    return Outcome(AttemptStatus.SUCCESS, result)


# --- the executor --------------------------------------------------------------------------


class CommandExecutor:
    """``kind: command``: TRUSTED programs only. Not a sandbox (docs/executors-and-providers.md)."""

    kind = "command"

    @staticmethod
    def available() -> bool:
        """Process groups and fork: a POSIX host."""
        return os.name == "posix"

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        settings = _parse(config, resolve=True)
        return {"kind": self.kind, "argv": settings.argv, "env": settings.env, "cwd": settings.cwd,
                "timeout": settings.timeout_ms, "max_output_bytes": settings.max_output_bytes}

    def execute(self, request: ExecutionRequest) -> Outcome:
        started = time.monotonic()  # the timeout covers everything from here, the supervisor's start included
        if request.signal.is_set():
            return Outcome(AttemptStatus.INTERRUPTED,
                           error=f"cancelled before the program started: {request.signal.reason}")
        try:
            settings = _parse(request.handler, resolve=False)
        except ConfigError as exc:  # a handler stored by another version: refused before anything starts
            return Outcome(AttemptStatus.FAILED, error=f"cannot run the command: {exc.field}: {exc.message}")
        env = {**child_environment(settings.env), **context_variables(request.context)}
        payload = json.dumps({"argv": settings.argv, "env": env, "cwd": settings.cwd,
                              "grace_s": TERM_GRACE_S}).encode() + b"\n"
        try:
            finished = run_child([sys.executable, "-I", "-S", "-c", SUPERVISOR], payload,
                                 started + settings.timeout_ms / 1000, request.signal, env={},
                                 output_limit=settings.max_output_bytes, keep_end=True, lifeline=True,
                                 term_grace_s=TERM_GRACE_S)
        except OSError as exc:
            return Outcome(AttemptStatus.FAILED, error=f"could not start the command's supervisor: {exc}; nothing ran")
        return _judge(finished, settings, request)


__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "DEFAULT_TIMEOUT_MS", "MAX_ARGS", "MAX_ARGV_CHARS", "MAX_ARG_CHARS", "MAX_ENV",
           "MAX_OUTPUT_BYTES", "MAX_TIMEOUT_MS", "SUPERVISOR", "TERM_GRACE_S", "CommandExecutor", "child_environment",
           "context_variables"]
