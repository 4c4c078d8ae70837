"""The audit trail: every operator action, newest first, filterable by actor and action."""

from __future__ import annotations

from flask import Blueprint, current_app, render_template, request
from flask.typing import ResponseReturnValue

from webapp.node import scheduler_of

bp = Blueprint("audit", __name__, url_prefix="/audit")
PAGE = 50


@bp.get("/")
def index() -> ResponseReturnValue:
    actor = request.args.get("actor") or None
    action = request.args.get("action") or None
    page = max(0, request.args.get("page", 0, type=int))
    page = min(page, 1_000_000 // PAGE)
    entries = scheduler_of(current_app).audit.list(actor, action, PAGE, page * PAGE)
    return render_template("audit.html", entries=entries, actor=actor, action=action, page=page, page_size=PAGE)
