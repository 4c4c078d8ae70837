"""Running helper scripts as real OS processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HELPERS = Path(__file__).parent


def faketime_prefix(offset: str) -> list[str]:
    """``faketime -f OFFSET`` (libfaketime), or skip/fail when it is not installed."""
    binary = shutil.which("faketime")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("faketime is not installed (apt-get install faketime)")
        pytest.skip("faketime is not installed (apt-get install faketime)")
    return [binary, "-f", offset]


def run_helper(script: str, *args: str, prefix: list[str] | None = None, timeout: float = 60,
               env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``tests/helpers/<script>`` in a new interpreter; return its JSON output."""
    command = [*(prefix or []), sys.executable, str(HELPERS / script), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, f"{script} failed ({done.returncode}): {done.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def spawn_helper(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(HELPERS / script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
