"""Flask application factory.

For now the app answers ``/healthz`` (no login: load balancers and probes call it); the
dashboard's pages, login and the scheduler node per worker come with the dashboard work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask, jsonify
from flask.typing import ResponseReturnValue

from scheduler_core.db import DatabaseConfig, create_engine, health_check, migration_state
from scheduler_core.errors import SchedulerError


def create_app(test_config: Mapping[str, Any] | None = None) -> Flask:
    app = Flask(__name__)
    app.config.from_prefixed_env("HAI")
    if test_config is not None:
        app.config.update(test_config)
    url = app.config.get("DATABASE_URL")
    config = DatabaseConfig.from_env({"HAI_DATABASE_URL": url} if url else None)
    engine = create_engine(config)
    app.extensions["hai_engine"] = engine

    @app.get("/healthz")
    def healthz() -> ResponseReturnValue:
        try:
            now_ms = health_check(engine)
            state = migration_state(engine)
        except SchedulerError as exc:
            return jsonify(status="unavailable", error=exc.code), 503
        status = "ok" if state.up_to_date else "migrations_pending"
        return jsonify(status=status, database_clock_ms=now_ms, schema=state.current), 200 if state.up_to_date else 503

    return app
