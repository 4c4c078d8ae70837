"""Scheduler nodes in their own OS processes (tests/helpers/node_process.py), and the reads a
multi-node test judges them by: the journal and the handlers' effects file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.db import db_now_ms
from scheduler_core.db.tables import executions
from tests.conftest import TestDatabase
from tests.helpers.processes import HELPERS, faketime_env

NODE_SETUPS = [("+2h", "Asia/Tokyo"), ("-2h", "America/New_York")]


def register_tasks(engine: Engine, definitions: Iterable[TaskDefinition]) -> None:
    """Store ``definitions`` through a short-lived node that never starts (as an admin would)."""
    admin = Scheduler(engine, SchedulerConfig(node_id="admin"))
    admin.init()
    try:
        for definition in definitions:
            admin.register(definition)
    finally:
        admin.close()


def db_now(engine: Engine) -> int:
    with engine.connect() as conn:
        value = int(conn.execute(select(db_now_ms())).scalar_one())
        conn.rollback()
    return value


def spawn_node(database: TestDatabase, node_id: str, effects: Path, index: int, env: dict[str, str],
           options: dict[str, Any], skew: bool = False) -> subprocess.Popen[str]:
    shift, zone = NODE_SETUPS[index % 2]
    command = [sys.executable, str(HELPERS / "node_process.py"), database.url, node_id, str(effects),
               json.dumps(options)]
    skewed = faketime_env(shift) if skew else {}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env, **skewed, "TZ": zone})


def effects_of(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


def wait_ready(path: Path, count: int, procs: list[subprocess.Popen[str]], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while sum(1 for e in effects_of(path) if e[0] == "ready") < count:
        for proc in procs:
            if proc.poll() is not None:
                raise AssertionError(f"node exited early: {proc.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, "nodes did not become ready"
        time.sleep(0.05)


def stop_nodes(procs: list[subprocess.Popen[str]]) -> list[str]:
    """SIGTERM every node and wait for each to exit 0 (a failure names its stderr's end); each
    node's stderr, for a test that failed before (its warnings say what a node saw)."""
    errors: list[str] = []
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    failures = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            failures.append(f"node did not stop on SIGTERM (its stderr's end: a close() over 40 s dumps every "
                            f"thread's stack there): ... {err[-8000:]}")
            continue
        errors.append(err or "")
        if proc.returncode != 0:
            failures.append(f"node exited with {proc.returncode}: {err[-3000:]}")
    assert not failures, "\n".join(failures)
    return errors


def journal(engine: Engine, **where: Any) -> list[Any]:
    query = select(executions)
    for name, value in where.items():
        query = query.where(executions.c[name] == value)
    with engine.connect() as conn:
        rows = list(conn.execute(query))
        conn.rollback()
    return rows


def next_boundary(engine: Engine, lead_ms: int = 6_000) -> tuple[int, int]:
    """A DB-clock test offset that puts the next minute boundary ``lead_ms`` from now, and that
    boundary (UTC ms): node processes get the offset through ``HAI_TEST_DB_CLOCK_OFFSET_MS``."""
    now = db_now(engine)
    lead = (60_000 - now % 60_000) - lead_ms
    offset = lead if lead > 0 else lead + 60_000
    boundary = now + offset + lead_ms
    return offset, boundary - boundary % 60_000


def boundary_ahead(engine: Engine, offset: int, margin_ms: int = 3_000) -> int:
    """The first minute boundary at least ``margin_ms`` ahead of the DB clock shifted by ``offset``.

    Register a test's tasks at it once the nodes are ready: on a loaded host starting three
    processes can take longer than ``next_boundary``'s lead, and a boundary the nodes were not up
    for is journaled ``missed`` (rightly), which is not what a routing test is about."""
    shifted = db_now(engine) + offset + margin_ms
    return shifted - shifted % 60_000 + 60_000


def cron_at(boundary: int) -> str:
    """A cron expression that fires at the minute ``boundary`` (once a day)."""
    moment = time.gmtime(boundary / 1000)
    return f"{moment.tm_min} {moment.tm_hour} * * *"
