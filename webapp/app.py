"""Flask application factory.

Configuration comes from the ``HAI_*`` settings the command line reads too, checked in one place
(``scheduler_core.settings.read_settings``: ``HAI_DATABASE_URL``, ``HAI_SECRET_KEY``,
``HAI_ADMIN_PASSWORD``, ``HAI_ENV``, the optional JSON file named by ``HAI_CONFIG_FILE``, ...),
then ``test_config``. Flask-SQLAlchemy owns the engine, on the same absolute SQLite path the
command line uses; scheduler_core gets it and does all the SQL. Every page needs a login except
``/healthz``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flask import Flask
from flask_sqlalchemy import SQLAlchemy
from flask_wtf.csrf import CSRFProtect

from scheduler_core.db import DatabaseConfig, engine_options, health_check, prepare_engine, upgrade
from scheduler_core.db.config import is_production
from scheduler_core.errors import ReachConfigError
from scheduler_core.oidc_settings import SignOn
from scheduler_core.reach import QueuePolicy
from scheduler_core.runtime.accounts import Accounts, AuditTrail
from scheduler_core.runtime.api_tokens import ApiTokens, check_rate_limit
from scheduler_core.runtime.startup import RESERVED_CONNECTIONS
from scheduler_core.settings import Settings, read_settings
from scheduler_core.testing import set_clock_offset_from_env
from webapp import (
    alerts,
    audit,
    auth,
    errors,
    executions,
    health,
    logs,
    nodes,
    notifications,
    oidc,
    overview,
    task_backfill,
    tasks,
    teams,
    timeline,
    users,
)
from webapp import runs as run_history
from webapp.api import bp as api_blueprint
from webapp.evidence import install as install_evidence
from webapp.first_start import bootstrap_admin, secret_key
from webapp.forms import posted
from webapp.metrics import install as install_metrics
from webapp.node import NODE_CONCURRENCY, accounts_of, make_reach, make_scheduler, reach_config
from webapp.timefmt import install as install_time_filters
from webapp.user_tokens import bp as user_tokens_blueprint

db = SQLAlchemy()
csrf = CSRFProtect()


def _asset_dir(name: str) -> Path:
    """``templates`` / ``static``: inside the package when installed from a wheel, else the
    project's top-level folder (a source checkout or an editable install)."""
    packaged = Path(__file__).with_name(name)
    return packaged if packaged.is_dir() else Path(__file__).resolve().parent.parent / name


def _database_config(app: Flask) -> DatabaseConfig:
    environ = dict(os.environ)
    if app.config.get("DATABASE_URL"):
        environ["HAI_DATABASE_URL"] = str(app.config["DATABASE_URL"])
    if app.config.get("ENV_NAME"):
        environ["HAI_ENV"] = str(app.config["ENV_NAME"])
    return DatabaseConfig.from_env(environ)


def _sized(options: dict[str, Any], app: Flask, threads: int = Settings.threads) -> dict[str, Any]:
    """One pool per worker process holds: every web thread's request, the node's handler
    threads plus its reserved connections (tick, lease keeper, operator call), and the
    notification round (its claims and ``queue.concurrency`` senders). Never smaller than the
    configured size."""
    try:
        reach = reach_config(app)
        senders = QueuePolicy.parse(reach.get("queue") if isinstance(reach, Mapping) else None).concurrency
    except (ReachConfigError, TypeError):
        senders = QueuePolicy().concurrency  # make_reach reports the bad setting by name
    needed = threads + NODE_CONCURRENCY + RESERVED_CONNECTIONS + 1 + senders
    options["pool_size"] = max(int(options.get("pool_size", 0)), needed)
    return options


def create_app(test_config: Mapping[str, Any] | None = None) -> Flask:
    app = Flask(__name__, template_folder=str(_asset_dir("templates")), static_folder=str(_asset_dir("static")))
    settings = read_settings()  # the same checks as every command: strings stay strings
    app.config.update(settings.dashboard_config())
    if test_config is not None:
        app.config.update(test_config)
    # The identity provider's discovery first: a provider that does not agree stops start-up before
    # anything runs (webapp/oidc.py).
    oidc.install(app, app.config.get("SIGN_ON") or SignOn(), str(app.config.get("ENV_NAME") or settings.environment))
    config = _database_config(app)
    app.config["SQLALCHEMY_DATABASE_URI"] = config.sqlalchemy_url().render_as_string(hide_password=False)
    app.config["SQLALCHEMY_ENGINE_OPTIONS"] = _sized(engine_options(config), app, settings.threads)
    app.config.setdefault("SECRET_KEY", None)
    app.config["SECRET_KEY"] = app.config["SECRET_KEY"] or secret_key(config)
    # Secure cookies whenever the dashboard is served over HTTPS: in production always (behind
    # a TLS-terminating proxy), elsewhere when HAI_COOKIE_SECURE=true.
    secure = bool(app.config.get("COOKIE_SECURE", is_production()))
    app.config.update(SESSION_COOKIE_HTTPONLY=True, SESSION_COOKIE_SAMESITE="Lax", SESSION_COOKIE_SECURE=secure,
                      WTF_CSRF_TIME_LIMIT=8 * 3600, PERMANENT_SESSION_LIFETIME=12 * 3600)
    db.init_app(app)
    csrf.init_app(app)
    with app.app_context():
        engine = prepare_engine(db.engine, busy_timeout_ms=config.busy_timeout_ms)
        set_clock_offset_from_env(engine)  # HAI_TEST_DB_CLOCK_OFFSET_MS: tests only, refused in production
        health_check(engine)
        upgrade(engine)  # under a database-wide lock: safe from every gunicorn worker at once
    app.extensions["hai_engine"] = engine
    app.extensions["hai_database"] = config
    app.extensions["hai_accounts"] = Accounts(engine)
    app.extensions["hai_audit"] = AuditTrail(engine)
    app.extensions["hai_api_tokens"] = ApiTokens(engine)
    app.config["API_RATE_LIMIT"] = check_rate_limit(app.config.get("API_RATE_LIMIT", Settings.api_rate_limit))
    scheduler = make_scheduler(engine, app.config)
    app.extensions["hai_scheduler"] = scheduler
    app.extensions["hai_reach"] = make_reach(app, scheduler)
    bootstrap_admin(accounts_of(app), app.config.get("ADMIN_PASSWORD"))
    for module in (health, auth, overview, tasks, task_backfill, timeline, run_history, executions, logs, notifications,
                   alerts, nodes, audit, users, teams):
        app.register_blueprint(module.bp)
    app.register_blueprint(user_tokens_blueprint)
    app.register_blueprint(api_blueprint)
    csrf.exempt(api_blueprint)  # bearer tokens only: no cookie signs an API call in, so there is nothing to forge
    errors.install(app)
    auth.install(app)
    install_metrics(app)  # /metrics: no login, its own token or address allow-list
    install_time_filters(app)
    install_evidence(app)
    app.add_template_global(posted, "posted")  # refused forms keep what was typed
    return app

