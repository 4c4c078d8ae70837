"""``/healthz``: answers without login; 200 when the database answers and the schema is current."""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue

from scheduler_core.db import health_check, migration_state
from scheduler_core.errors import SchedulerError

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> ResponseReturnValue:
    engine = current_app.extensions["hai_engine"]
    try:
        now_ms = health_check(engine)
        state = migration_state(engine)
    except SchedulerError as exc:
        return jsonify(status="unavailable", error=exc.code), 503
    status = "ok" if state.up_to_date else "migrations_pending"
    return jsonify(status=status, database_clock_ms=now_ms, schema=state.current), 200 if state.up_to_date else 503
