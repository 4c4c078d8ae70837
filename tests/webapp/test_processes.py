"""The real commands: `hai-scheduler create-user` and `hai-scheduler serve` (gunicorn + one node per worker)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from sqlalchemy import select

from scheduler_core.db import close_engine, create_engine
from scheduler_core.db.tables import nodes
from tests.helpers.served import free_port

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
FIRST_ADMIN = re.compile(r"created user 'admin' with password (\S+) \(shown once; change it with `([^`]+)`\)")


def _cli(*args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webapp.cli", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env}, cwd=cwd)


def _clean_environ() -> dict[str, str]:
    """This process's environment without the settings a test chooses itself."""
    return {name: value for name, value in os.environ.items()
            if not name.startswith("HAI_") or name.startswith("HAI_TEST")}


class Served:
    """A running ``hai-scheduler serve``: its address, and its stderr as it comes."""

    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        self.process, self.url, self.lines = process, url, []  # type: list[str]
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    def stderr(self) -> str:
        return "".join(self.lines)

    def wait_healthy(self, seconds: float = 60) -> requests.Response:
        deadline = time.monotonic() + seconds
        while True:
            try:
                return requests.get(f"{self.url}/healthz", timeout=5)
            except requests.RequestException:  # not listening yet, or the worker is still starting
                assert self.process.poll() is None, self.stderr()[-3000:]
                assert time.monotonic() < deadline, "gunicorn did not answer"
                time.sleep(0.2)

    def login(self, name: str, password: str) -> requests.Response:
        session = requests.Session()
        page = session.get(f"{self.url}/login", timeout=5)
        token = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        return session.post(f"{self.url}/login", timeout=5,
                            data={"username": name, "password": password, "csrf_token": token})

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)
        self._reader.join(timeout=10)
        return self.process.returncode


@contextmanager
def _serving(cwd: Path, env: dict[str, str], workers: int = 2) -> Iterator[Served]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "webapp.cli", "serve", "--bind", f"127.0.0.1:{port}",
                                "--workers", str(workers)], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, cwd=cwd)
    served = Served(process, f"http://127.0.0.1:{port}")
    try:
        yield served
    finally:
        if process.poll() is None:
            served.stop()


def _logged_in(response: requests.Response) -> bool:
    return response.status_code == 200 and "Overview" in response.text


def test_serve_hosts_the_dashboard_and_a_node_per_worker(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/served.db"
    env = {"HAI_DATABASE_URL": url, "HAI_ADMIN_PASSWORD": "first admin pw"}
    created = _cli("create-user", "alice", "--role", "operator", env={**env, "HAI_NEW_PASSWORD": "alice-secret"})
    assert created.returncode == 0, created.stderr
    assert _cli("create-user", "alice", "--role", "operator", env={**env, "HAI_NEW_PASSWORD": "x" * 9}).returncode == 1
    with _serving(tmp_path, {**_clean_environ(), **env}) as server:
        health = server.wait_healthy()
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert _logged_in(server.login("alice", "alice-secret"))
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
        assert server.stop() == 0, server.stderr()[-3000:]
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            stopped = conn.execute(select(nodes.c.stopped_at)).scalars().all()
            conn.rollback()
    finally:
        close_engine(engine)
    assert len(stopped) == 2 and all(stopped), "worker nodes were not closed on shutdown"


def test_an_admin_password_of_digits_logs_in(tmp_path: Path) -> None:
    """HAI_ADMIN_PASSWORD=12345678 stays a string: it once reached the app as a number and no worker booted."""
    env = {**_clean_environ(), "HAI_DATABASE_URL": f"sqlite:///{tmp_path}/digits.db", "HAI_ADMIN_PASSWORD": "12345678"}
    with _serving(tmp_path, env, workers=1) as server:
        server.wait_healthy()
        assert _logged_in(server.login("admin", "12345678")), server.stderr()[-3000:]


def _run_printed(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The command the first start printed, as a person would paste it."""
    words = shlex.split(command)
    if shutil.which(words[0], path=os.environ.get("PATH")) is None and not os.path.isfile(cwd / words[0]):
        words = [sys.executable, "-m", "webapp.cli", *words[1:]]  # not installed as a script here
    return subprocess.run(words, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_a_first_run_in_a_fresh_directory_uses_one_database_for_every_command(tmp_path: Path) -> None:
    """No HAI_DATABASE_URL: the dashboard, its workers and the commands all use ./scheduler.db of
    the directory they run in; the printed reset command works; a user made by the command line
    logs in; every file the first run leaves is ignored by git."""
    env = _clean_environ()
    with _serving(tmp_path, env) as server:
        server.wait_healthy()
        deadline = time.monotonic() + 30
        while (printed := FIRST_ADMIN.search(server.stderr())) is None:
            assert time.monotonic() < deadline, server.stderr()[-3000:]
            time.sleep(0.1)
        password, reset = printed.groups()
        assert _logged_in(server.login("admin", password))
        changed = _run_printed(reset, tmp_path, {**env, "HAI_NEW_PASSWORD": "a new admin password"})
        assert changed.returncode == 0, changed.stderr
        assert _logged_in(server.login("admin", "a new admin password"))
        assert not _logged_in(server.login("admin", password))
        made = _cli("create-user", "bob", "--role", "viewer", env={**env, "HAI_NEW_PASSWORD": "bob-password"},
                    cwd=tmp_path)
        assert made.returncode == 0, made.stderr
        assert _logged_in(server.login("bob", "bob-password"))
        assert server.stop() == 0, server.stderr()[-3000:]
    left = sorted(path.name for path in tmp_path.iterdir())
    assert "scheduler.db" in left and "scheduler.db.secret-key" in left, left
    if (ROOT / ".git").exists() and shutil.which("git"):
        for name in {*left, "scheduler.db-wal", "scheduler.db-shm", "hai-secret.key"}:
            ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q", name])
            assert ignored.returncode == 0, f"git does not ignore {name}"


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
