"""One worker process (a code worker, or a command's supervisor): start it, feed it, drain it,
and always kill and reap it.

The child gets its own session (process group), so a timeout or a cancellation kills the
whole group -- grandchildren included -- with SIGKILL (after a SIGTERM and a grace period when
asked), and the child is reaped with ``wait()`` before the outcome is recorded. stdout and
stderr are drained in threads and kept up to a bound (their beginning, or their beginning and
end), so a chatty child never blocks on a full pipe; the result arrives on a dedicated pipe
that nothing the task prints can forge. A child may be given its stdin as a lifeline: held open
until the attempt ends, it reads end-of-file only if the node dies first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from scheduler_core.executors.base import CancelSignal

OUTPUT_LIMIT_BYTES = 64 * 1024  # kept per captured stream
RESULT_LIMIT_BYTES = 16 * 1024 * 1024  # a larger result is refused rather than held in memory
READER_GRACE_S = 2.0  # how long to wait for the pipes to drain once the process group is dead

Ending = Literal["exited", "timeout", "cancelled"]


class _PipeReader:
    """Drains one pipe in a daemon thread, keeping its first ``head`` and last ``tail`` bytes.

    Reading in a thread matters: a child that fills a 64 KiB pipe buffer nobody reads would
    block forever in write() and turn every chatty task into a timeout. The thread owns the fd
    and closes it at EOF; if a process that escaped the group keeps the pipe open, the thread
    is simply abandoned (daemon) and we use what was read so far.
    """

    def __init__(self, fd: int, head: int, name: str, tail: int = 0) -> None:
        self._fd = fd
        self._head_limit = head
        self._tail_limit = tail
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0
        self._lock = threading.Lock()  # an abandoned thread may still append while we read
        self._thread = threading.Thread(target=self._drain, name=name, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        try:
            while chunk := os.read(self._fd, 65536):
                with self._lock:
                    self._keep(chunk)
        except OSError:
            pass  # nothing more can be read; what we have is all there is
        finally:
            os.close(self._fd)

    def _keep(self, chunk: bytes) -> None:
        self._total += len(chunk)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self._tail_limit:
            self._tail += chunk
            del self._tail[:max(0, len(self._tail) - self._tail_limit)]

    def join(self, deadline: float) -> bool:
        self._thread.join(max(0.0, deadline - time.monotonic()))
        return not self._thread.is_alive()

    @property
    def dropped(self) -> int:
        with self._lock:
            return self._total - len(self._head) - len(self._tail)

    def data(self) -> bytes:
        with self._lock:
            return bytes(self._head + self._tail)

    def text(self) -> str:
        """The kept bytes as UTF-8 text; a cut says how much was dropped, where it was dropped."""
        with self._lock:
            head, tail = bytes(self._head), bytes(self._tail)
            dropped = self._total - len(head) - len(tail)
        text = head.decode("utf-8", errors="replace")
        if not dropped:
            return text + tail.decode("utf-8", errors="replace")
        marker = f"\n[truncated: {dropped} bytes dropped]"
        return f"{text}{marker}\n{tail.decode('utf-8', errors='replace')}" if self._tail_limit else text + marker


def _feed(fd: int, data: bytes, close: bool) -> None:
    """Write the payload to the child's stdin (in a thread: it may exceed the pipe buffer)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        pass  # the child exited or closed stdin: it no longer needs the payload
    finally:
        if close:
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


def _signal_group(pid: int, number: signal.Signals) -> None:
    """Signal the child's whole process group: the child and everything it spawned."""
    # An already empty group is fine (macOS answers EPERM rather than ESRCH for a zombie-only group).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, number)


def _stop(pid: int, term_grace_s: float) -> bool:
    """SIGTERM the group and give it ``term_grace_s`` to end; True when the grace ran out."""
    _signal_group(pid, signal.SIGTERM)
    return _wait_for_exit(pid, time.monotonic() + term_grace_s, CancelSignal()) == "timeout"


def _close_all(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


@dataclass(frozen=True)
class Finished:
    """What an attempt's child process left behind."""

    ending: Ending
    returncode: int
    result: bytes
    result_too_large: bool
    stdout: str
    stderr: str
    killed_after_grace: bool = False  # stopped (timeout, cancellation) and still running when the grace ran out


def run_child(command: list[str], payload: bytes, deadline: float, cancel: CancelSignal, *,
              env: Mapping[str, str] | None = None, output_limit: int = OUTPUT_LIMIT_BYTES, keep_end: bool = False,
              lifeline: bool = False, term_grace_s: float = 0.0) -> Finished:
    """Start the child, wait for its end, kill its group and reap it; never returns with it alive.

    ``env`` is the child's whole environment (None: the node's). Each output stream keeps its
    first ``output_limit`` bytes, or with ``keep_end`` its first and last halves. With
    ``lifeline`` the child's stdin stays open after the payload until the group is dead. With
    ``term_grace_s`` a timeout or a cancellation sends SIGTERM first and SIGKILL only after it.
    """
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    result_r, result_w = os.pipe()
    try:
        # start_new_session: the child leads a new process group, so one killpg reaches every
        # process the code starts (a shell, `sleep 60`, ...) and not the scheduler itself.
        process = subprocess.Popen([*command, str(result_w)], stdin=stdin_r, stdout=stdout_w, stderr=stderr_w,
                                   pass_fds=(result_w,), start_new_session=True, env=env)
    except BaseException:
        _close_all(stdin_r, stdin_w, stdout_r, stdout_w, stderr_r, stderr_w, result_r, result_w)
        raise
    # The parent must drop its copies of the child's ends, or the readers would never see EOF.
    _close_all(stdin_r, stdout_w, stderr_w, result_w)
    writer = threading.Thread(target=_feed, args=(stdin_w, payload, not lifeline), name="code-stdin", daemon=True)
    writer.start()
    head, tail = (output_limit - output_limit // 2, output_limit // 2) if keep_end else (output_limit, 0)
    stdout = _PipeReader(stdout_r, head, "code-stdout", tail)
    stderr = _PipeReader(stderr_r, head, "code-stderr", tail)
    result = _PipeReader(result_r, RESULT_LIMIT_BYTES, "code-result")
    killed_after_grace = False
    try:
        ending = _wait_for_exit(process.pid, deadline, cancel)
        if ending != "exited" and term_grace_s > 0:
            killed_after_grace = _stop(process.pid, term_grace_s)
    finally:
        # Kill first, reap second: while the exited leader is unreaped its pid (= the group id)
        # cannot be recycled, so the kill is safe; then wait() collects it so no zombie remains.
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()  # SIGKILL cannot be caught or ignored: this returns promptly
        grace = time.monotonic() + READER_GRACE_S
        writer.join(max(0.0, grace - time.monotonic()))
        if lifeline:
            os.close(stdin_w)  # the group is dead: nobody is left to read the end of the lifeline
    for reader in (result, stdout, stderr):
        reader.join(grace)
    return Finished(ending, process.returncode, result.data(), result.dropped > 0, stdout.text(), stderr.text(),
                    killed_after_grace)
