"""A resolution's reason goes into the audit trail after the change is made: a reason the audit
trail cannot store (NUL) must be refused before, or the change lands while the answer says 400.
Found by the API fuzz (tests/webapp/test_api_fuzz.py); the pages share the rule (forms.review_errors)."""

from __future__ import annotations

import uuid

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import update

from scheduler_core.db.tables import reach_queue
from scheduler_core.store.reach_queue import QueueRepository
from tests.webapp.conftest import Auth, csrf_token
from webapp.node import reach_of


def test_a_nul_in_the_reason_of_a_delivery_resolution_changes_nothing(app: Flask, client: FlaskClient,
                                                                       auth: Auth) -> None:
    engine = app.extensions["hai_engine"]
    queue_id = str(uuid.uuid4())
    QueueRepository(engine, "test", 60_000).enqueue(queue_id, "log", None, "someone@example.com", "S", "body", {},
                                                    (3, 1_000, 4_000), None)
    with engine.begin() as conn:
        conn.execute(update(reach_queue).where(reach_queue.c.queue_id == queue_id).values(status="unknown"))
    entry = reach_of(app).queue.get(queue_id)
    assert entry is not None
    auth.login()
    response = client.post(f"/notifications/unknown/{queue_id}/resolve", data={
        "csrf_token": csrf_token(client, "/notifications/unknown"), "status": "sent", "reason": "a\x00b",
        "message_id": "", "expected_updated_at": str(entry.updated_at)})
    assert response.status_code == 400 and "Remove the NUL character" in response.get_data(as_text=True)
    assert reach_of(app).queue.get(queue_id).status == "unknown"  # type: ignore[union-attr]
