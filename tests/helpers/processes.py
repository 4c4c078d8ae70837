"""Running helper scripts as real OS processes."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HELPERS = Path(__file__).parent


def faketime_env(offset: str) -> dict[str, str]:
    """Environment that shifts a child's wall clock by ``offset`` with libfaketime.

    The library is preloaded directly (not through the ``faketime`` wrapper, which forks and
    would swallow the signals that tests send). Only the wall clock is shifted
    (DONT_FAKE_MONOTONIC): with a faked monotonic clock, Python's condition-variable waits
    never wake up under libfaketime 0.9.10. Skips (fails under CI) when it is not installed.
    """
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1")) + sorted(
        glob.glob("/usr/lib/faketime/libfaketime.so.1"))
    if not found:
        if os.environ.get("CI"):
            pytest.fail("libfaketime is not installed (apt-get install faketime)")
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    return {"LD_PRELOAD": found[0], "FAKETIME": offset, "DONT_FAKE_MONOTONIC": "1"}


def run_helper(script: str, *args: str, timeout: float = 60, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``tests/helpers/<script>`` in a new interpreter; return its JSON output."""
    command = [sys.executable, str(HELPERS / script), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, f"{script} failed ({done.returncode}): {done.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def spawn_helper(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(HELPERS / script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
