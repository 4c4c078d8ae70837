"""One code worker process: start it, feed it, drain it, and always kill and reap it.

The child gets its own session (process group), so a timeout or a cancellation kills the
whole group -- grandchildren included -- with SIGKILL, and the child is reaped with
``wait()`` before the outcome is recorded. stdout and stderr are drained in threads and kept
up to a bound, so a chatty child never blocks on a full pipe; the result arrives on a
dedicated pipe that nothing the task code prints can forge.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Literal

from scheduler_core.executors.base import CancelSignal

OUTPUT_LIMIT_BYTES = 64 * 1024  # kept per captured stream
RESULT_LIMIT_BYTES = 16 * 1024 * 1024  # a larger result is refused rather than held in memory
READER_GRACE_S = 2.0  # how long to wait for the pipes to drain once the process group is dead

Ending = Literal["exited", "timeout", "cancelled"]


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
class Finished:
    """What an attempt's child process left behind."""

    ending: Ending
    returncode: int
    result: bytes
    result_too_large: bool
    stdout: str
    stderr: str


def run_child(command: list[str], payload: bytes, deadline: float, cancel: CancelSignal) -> Finished:
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
    return Finished(ending, process.returncode, result.data(), result.dropped > 0, stdout.text(), stderr.text())
