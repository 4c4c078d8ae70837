"""The audit trail: every operator action, newest first, filterable by actor and action, each
shown as a readable before / after diff (``field: old → new``), secrets masked again on display.

``record_action`` is how every blueprint writes to it: the signed-in user is the actor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, current_app, g, render_template, request
from flask.typing import ResponseReturnValue

from scheduler_core.masking import mask_text, mask_values
from webapp.node import audit_of

bp = Blueprint("audit", __name__, url_prefix="/audit")
PAGE = 50
VALUE_CHARS = 200  # a value longer than this is cut on the page (the stored entry keeps it whole)
CHANGES_SHOWN = 60
_ABSENT = object()


@dataclass(frozen=True)
class Change:
    """One field of an audit entry: its dotted path and the value before and after (None: absent)."""

    field: str
    old: str | None
    new: str | None


def _flat(value: Any, prefix: str = "", depth: int = 0) -> dict[str, Any]:
    """Nested objects as dotted paths (``handler.headers.Authorization``); lists and scalars are leaves."""
    if isinstance(value, dict) and value and depth < 6:
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flat(item, f"{prefix}.{key}" if prefix else str(key), depth + 1))
        return flat
    return {prefix or "value": value}


def _shown(value: Any) -> str | None:
    if value is _ABSENT:
        return None
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    text = mask_text(text) or ""
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


@bp.app_template_global()
def audit_changes(before: Any, after: Any) -> list[Change]:
    """The fields that differ between ``before`` and ``after``, masked, in a stable order."""
    old = _flat(mask_values(before)) if before is not None else {}
    new = _flat(mask_values(after)) if after is not None else {}
    fields = list(old) + [name for name in new if name not in old]
    changes = [Change(name, _shown(old.get(name, _ABSENT)), _shown(new.get(name, _ABSENT))) for name in fields
               if old.get(name, _ABSENT) != new.get(name, _ABSENT)]
    return changes[:CHANGES_SHOWN]


def record_action(action: str, target: str | None, *, before: Any = None, after: Any = None,
                  reason: str | None = None, team: str | None = None) -> None:
    """Record what the signed-in user just did (the caller masks secrets in ``before`` / ``after``);
    ``team`` when the target does not say which team it is about (``AuditTrail.record``)."""
    audit_of(current_app).record(g.user.name, action, target, before=before, after=after, reason=reason, team=team)


@bp.get("/")
def index() -> ResponseReturnValue:
    actor = request.args.get("actor") or None
    action = request.args.get("action") or None
    page = max(0, request.args.get("page", 0, type=int))
    page = min(page, 1_000_000 // PAGE)
    entries = audit_of(current_app).list(actor, action, PAGE, page * PAGE, g.user.access.scope())
    return render_template("audit/index.html", entries=entries, actor=actor, action=action, page=page, page_size=PAGE)
