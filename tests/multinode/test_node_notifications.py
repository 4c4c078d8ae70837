"""``hai-scheduler node`` with notifications configured runs delivery rounds and alerts on its tick,
as every dashboard worker does (before, a standalone node never delivered anything)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from tests.conftest import TestDatabase
from tests.helpers.http_server import RecordingServer

pytestmark = pytest.mark.slow


def test_a_standalone_node_alerts_through_its_notifications(database: TestDatabase, engine: Engine,
                                                             tmp_path: Path) -> None:
    with RecordingServer() as receiver, RecordingServer() as hanging:
        admin = Scheduler(engine, SchedulerConfig(node_id="admin"))
        admin.init()
        admin.register(TaskDefinition(id="export", name="Export", cron="0 3 * * *", enabled=False,
                                      handler={"kind": "api", "url": hanging.url("/slow/30"), "timeout": 2000}))
        config = {"providers": [{"name": "ops-hook", "type": "api", "url": receiver.url("/echo")}],
                  "templates": [{"name": "alert", "provider": "ops-hook", "body": "{event} {occurrence_id} {link}"}],
                  "alerts": [{"name": "ops", "events": ["execution.unknown"], "template": "alert", "to": "ops"}]}
        (tmp_path / "reach.json").write_text(json.dumps(config))
        env = {**os.environ, "HAI_DATABASE_URL": database.url, "HAI_REACH_CONFIG": str(tmp_path / "reach.json"),
               "HAI_PUBLIC_URL": "https://scheduler.example"}
        node = subprocess.Popen([sys.executable, "-m", "webapp.cli", "node", "--node-id", "standalone"], env=env,
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert node.stdout is not None and "running" in node.stdout.readline()
            log = admin.trigger("export")  # run on this process: unknown (sent, never answered)
            assert log.status == "unknown"
            deadline = time.monotonic() + 30
            while not receiver.requests:
                assert node.poll() is None, node.communicate()[1][-2000:]
                assert time.monotonic() < deadline, "the standalone node sent no alert"
                time.sleep(0.1)
        finally:
            admin.close()
            node.send_signal(signal.SIGTERM)
            _, err = node.communicate(timeout=60)
        assert node.returncode == 0, err[-2000:]
        (alert,) = [r.json() for r in receiver.requests]
        assert alert["body"] == f"execution.unknown {log.occurrence_id} https://scheduler.example/executions/unknown"
