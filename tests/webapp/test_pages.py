"""Read-only pages render for every role and show what they should."""

from __future__ import annotations

import threading
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from scheduler_core import TaskDefinition
from tests.webapp.conftest import Auth
from webapp.node import audit_of


def test_nodes_page_shows_nodes_and_their_leases(app: Flask, client: FlaskClient, auth: Auth) -> None:
    scheduler = app.extensions["hai_scheduler"]
    entered, release = threading.Event(), threading.Event()

    def slow(event: Any) -> Any:
        entered.set()
        release.wait(10)
        return "ok"

    scheduler.set_hooks({"on_task_execute": slow})
    scheduler.register(TaskDefinition(id="slow", name="Slow", cron="0 2 * * *"))
    scheduler.start()
    worker = threading.Thread(target=scheduler.trigger, args=("slow",))
    worker.start()
    try:
        assert entered.wait(10)
        auth.login()
        page = client.get("/nodes/").get_data(as_text=True)
        assert scheduler.config.node_id in page and ">slow<" in page and "No execution is running" not in page
        assert "<td>api, command, hook, python</td>" in page.replace(", js", "")  # what it runs, from its heartbeat
    finally:
        release.set()
        worker.join()
        scheduler.stop()


def test_audit_page_filters(app: Flask, client: FlaskClient, auth: Auth) -> None:
    audit = audit_of(app)
    audit.record("alice", "execution.resolve_unknown", "occ-1", before={"status": "unknown"},
                 after={"status": "success"}, reason="ok")
    audit.record("bob", "task.trigger", "report")
    auth.login()
    everything = client.get("/audit/").get_data(as_text=True)
    assert "alice" in everything and "bob" in everything
    only_alice = client.get("/audit/?actor=alice").get_data(as_text=True)
    assert "occ-1" in only_alice and "task.trigger" not in only_alice


def test_every_page_renders_with_navigation(client: FlaskClient, auth: Auth) -> None:
    auth.login()
    for path in ("/", "/executions/", "/executions/unknown", "/nodes/", "/audit/"):
        response = client.get(path)
        assert response.status_code == 200, path
        text = response.get_data(as_text=True)
        assert 'href="/nodes/"' in text and 'href="/audit/"' in text
