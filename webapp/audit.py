"""The audit trail: every operator action, newest first, filterable by actor and action."""

from __future__ import annotations

from flask import Blueprint, current_app, render_template, request
from flask.typing import ResponseReturnValue

from scheduler_core.store.users import AuditRepository

bp = Blueprint("audit", __name__, url_prefix="/audit")
PAGE = 50


@bp.get("/")
def index() -> ResponseReturnValue:
    actor = request.args.get("actor") or None
    action = request.args.get("action") or None
    page = max(0, request.args.get("page", 0, type=int))
    entries = AuditRepository(current_app.extensions["hai_engine"]).list(actor, action, PAGE, page * PAGE)
    return render_template("audit.html", entries=entries, actor=actor, action=action, page=page, page_size=PAGE)
