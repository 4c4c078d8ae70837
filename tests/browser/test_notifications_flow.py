"""An operator requeues a dead letter in the browser (confirmation dialog, flash, audit trail)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from scheduler_core.db import close_engine, create_engine
from scheduler_core.reach import Reach
from scheduler_core.store.reach_queue import QueueRepository
from tests.browser.conftest import Dashboard, Screens, login


def _dead_letter(dashboard: Dashboard) -> str:
    """A message the webhook refuses (400 from an idempotent API provider: dead at once)."""
    engine = create_engine(dashboard.database_url)
    try:
        queue_id = str(uuid.uuid4())
        QueueRepository(engine, "browser-test", 30_000).enqueue(
            queue_id, "webhook", None, "ops-channel", "Disk almost full", "92% on /data", {}, (3, 1_000, 4_000), None)
        reach = Reach(engine, dashboard.reach_config, node_id="browser-test", auto_migrate=False)
        reach.init()
        try:
            deadline = time.monotonic() + 30
            while (entry := reach.queue.get(queue_id)) is None or entry.status != "dead":
                assert time.monotonic() < deadline, f"not dead: {entry}"
                reach.run_round()  # the dashboard's own node may take it first: either way it ends dead
                time.sleep(0.2)
        finally:
            reach.close()
        return queue_id
    finally:
        close_engine(engine)


def _status(dashboard: Dashboard, queue_id: str) -> str:
    engine = create_engine(dashboard.database_url)
    try:
        entry = QueueRepository(engine, "browser-test", 30_000).get(queue_id)
        assert entry is not None
        return entry.status
    finally:
        close_engine(engine)


def test_requeue_a_dead_letter(page: Any, dashboard: Dashboard, shot: Screens) -> None:
    queue_id = _dead_letter(dashboard)
    login(page, dashboard)
    page.goto(dashboard("/notifications/"))
    shot(page, "queue")
    page.goto(dashboard("/notifications/dead"))
    row = page.get_by_role("row").filter(has_text=queue_id)
    assert "permanent_rejection" in row.inner_text()
    shot(page, "dead-letters")
    dialogs: list[str] = []
    page.once("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))
    row.get_by_role("button", name=f"Requeue {queue_id}").click()
    page.wait_for_load_state("networkidle")
    assert dialogs == ["Requeue this dead letter?"]
    assert page.locator(".flash").filter(has_text="equeued").count() >= 1, page.content()
    shot(page, "requeued")
    assert _status(dashboard, queue_id) in ("pending", "processing", "sending", "dead")  # dead again after a round
    page.goto(dashboard("/audit/?action=notification.requeue"))
    assert page.get_by_role("cell", name=queue_id).count() + page.get_by_text(queue_id).count() >= 1
    shot(page, "audit")
    for path, step in (("/notifications/unknown", "unknown-deliveries"), ("/notifications/templates", "templates"),
                       ("/notifications/providers", "providers")):
        page.goto(dashboard(path))
        shot(page, step)
    assert "hook-secret-1" not in page.content()  # the provider's Authorization header is masked
