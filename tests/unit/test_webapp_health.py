"""/healthz answers without login and reports the schema state."""

from __future__ import annotations

from pathlib import Path

from scheduler_core.db import close_engine, create_engine, upgrade
from webapp import create_app


def test_healthz_reports_pending_then_ok(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/web.db"
    app = create_app({"DATABASE_URL": url, "TESTING": True})
    client = app.test_client()
    pending = client.get("/healthz")
    assert pending.status_code == 503 and pending.json["status"] == "migrations_pending"
    engine = create_engine(url)
    upgrade(engine)
    close_engine(engine)
    ok = client.get("/healthz")
    assert ok.status_code == 200 and ok.json["status"] == "ok" and isinstance(ok.json["database_clock_ms"], int)
    close_engine(app.extensions["hai_engine"])
