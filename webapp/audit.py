"""The audit trail: every operator action, newest first, filterable by actor and action.

``record_action`` is how every blueprint writes to it: the signed-in user is the actor.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app, g, render_template, request
from flask.typing import ResponseReturnValue

from webapp.node import audit_of

bp = Blueprint("audit", __name__, url_prefix="/audit")
PAGE = 50


def record_action(action: str, target: str | None, *, before: Any = None, after: Any = None,
                  reason: str | None = None) -> None:
    """Record what the signed-in user just did (the caller masks secrets in ``before`` / ``after``)."""
    audit_of(current_app).record(g.user.name, action, target, before=before, after=after, reason=reason)


@bp.get("/")
def index() -> ResponseReturnValue:
    actor = request.args.get("actor") or None
    action = request.args.get("action") or None
    page = max(0, request.args.get("page", 0, type=int))
    page = min(page, 1_000_000 // PAGE)
    entries = audit_of(current_app).list(actor, action, PAGE, page * PAGE)
    return render_template("audit/index.html", entries=entries, actor=actor, action=action, page=page, page_size=PAGE)
