"""The dashboard under the real server, as the README deploys it: ``hai-scheduler serve`` with
gunicorn workers, in its own process, on a free 127.0.0.1 port; SIGTERM at the end, which must
end it cleanly (exit status 0)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(cwd: Path, env: dict[str, str], workers: int = 2, start_s: float = 60) -> Iterator[str]:
    """``hai-scheduler serve --workers N`` with ``env`` added to this process's environment;
    yields the base URL once ``/healthz`` answers 200."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "webapp.cli", "serve", "--bind", f"127.0.0.1:{port}",
                               "--workers", str(workers)], env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, cwd=cwd)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_s
        while True:
            try:
                if requests.get(f"{base}/healthz", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert server.poll() is None, server.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "gunicorn did not answer"
            time.sleep(0.2)
        yield base
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=60)
    assert server.returncode == 0, err[-3000:]
