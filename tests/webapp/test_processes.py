"""The real commands: `hai-scheduler create-user` and `hai-scheduler serve` (gunicorn + one node per worker)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from sqlalchemy import select

from scheduler_core.db import close_engine, create_engine
from scheduler_core.db.tables import nodes

pytestmark = pytest.mark.slow


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webapp.cli", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_hosts_the_dashboard_and_a_node_per_worker(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/served.db"
    env = {"HAI_DATABASE_URL": url, "HAI_ADMIN_PASSWORD": "first admin pw"}
    created = _cli("create-user", "alice", "--role", "operator", env={**env, "HAI_NEW_PASSWORD": "alice-secret"})
    assert created.returncode == 0, created.stderr
    assert _cli("create-user", "alice", "--role", "operator", env={**env, "HAI_NEW_PASSWORD": "x" * 9}).returncode == 1
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "webapp.cli", "serve", "--bind", f"127.0.0.1:{port}",
                               "--workers", "2"], env={**os.environ, **env}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                health = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
                break
            except requests.RequestException:  # not listening yet, or the worker is still starting
                assert server.poll() is None, server.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "gunicorn did not answer"
                time.sleep(0.2)
        assert health.status_code == 200 and health.json()["status"] == "ok"
        session = requests.Session()
        login_page = session.get(f"http://127.0.0.1:{port}/login", timeout=5)
        token = login_page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        overview = session.post(f"http://127.0.0.1:{port}/login", timeout=5,
                                data={"username": "alice", "password": "alice-secret", "csrf_token": token})
        assert overview.status_code == 200 and "Overview" in overview.text
        engine = create_engine(url)
        try:
            deadline = time.monotonic() + 30
            while True:
                with engine.connect() as conn:
                    alive = conn.execute(select(nodes.c.node_id).where(nodes.c.stopped_at.is_(None))).scalars().all()
                    conn.rollback()
                if len(alive) == 2:
                    break
                assert time.monotonic() < deadline, f"nodes: {alive}"
                time.sleep(0.2)
        finally:
            close_engine(engine)
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=60)
    assert server.returncode == 0, err[-3000:]
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            stopped = conn.execute(select(nodes.c.stopped_at)).scalars().all()
            conn.rollback()
    finally:
        close_engine(engine)
    assert len(stopped) == 2 and all(stopped), "worker nodes were not closed on shutdown"


def test_each_worker_pool_holds_the_notification_senders() -> None:
    """A worker's pool is sized for its web threads, its node and its delivery round, whose
    ``queue.concurrency`` senders each need a connection while they settle a message."""
    from flask import Flask

    from webapp.app import _sized

    def pool_size(reach: object) -> int:
        bare = Flask("sizing")
        bare.config["REACH"] = reach
        return int(_sized({"pool_size": 1}, bare)["pool_size"])

    default = pool_size({})
    assert pool_size({"queue": {"concurrency": 12}}) == default + 8  # the default is 4 senders
    assert pool_size({"queue": {"concurrency": 0}}) == default  # refused by name when reach starts
    assert _sized({"pool_size": 500}, Flask("sizing"))["pool_size"] == 500  # never below the setting
