"""Alerts: the alerts raised with their delivery status, and the rules (configured ones read-only,
stored ones edited by admins, with a test alert). Everything goes through ``reach.alerts``."""

from __future__ import annotations

import contextlib
from typing import Any

from flask import Blueprint, abort, current_app, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from scheduler_core.errors import ReachConfigError, ReachError
from scheduler_core.reach import Reach
from scheduler_core.reach.alert_rules import ALERT_VARIABLES, AlertEvent, AlertRule
from scheduler_core.reach.alerts import covered
from webapp.audit import record_action
from webapp.auth import require_role
from webapp.forms import posted_version
from webapp.node import reach_of, scheduler_of

bp = Blueprint("alerts", __name__, url_prefix="/notifications/alerts")
RECENT = 50
TASKS_SAMPLED = 10_000  # a rule's glob is checked against at most this many task ids


def _reach() -> Reach:
    return reach_of(current_app)


@bp.get("/")
def index() -> ResponseReturnValue:
    reach = _reach()
    rules = reach.alerts.rules()
    configured = {r.name for r in reach.alerts.configured()}
    tasks = [t.id for t in scheduler_of(current_app).tasks][:TASKS_SAMPLED]
    return render_template("alerts/index.html", rules=rules, configured=configured, alerts=reach.alerts.recent(RECENT),
                           matches=covered(rules, tasks), versions=reach.alerts.stored_versions())


# --- stored rules ----------------------------------------------------------------------------------


def _form(mode: str, values: dict[str, Any], errors: dict[str, str], status: int = 200) -> ResponseReturnValue:
    reach = _reach()
    templates = sorted({t.name for t in reach.configured_templates()} | {t.name for t in reach.templates.stored()})
    return render_template("alerts/form.html", mode=mode, values=values, errors=errors, events=list(AlertEvent),
                           templates=templates, providers=reach.provider_names(), variables=ALERT_VARIABLES), status


def _posted() -> dict[str, Any]:
    form = request.form
    values: dict[str, Any] = {"name": form.get("name", "").strip(), "events": form.getlist("events"),
                              "template": form.get("template", ""), "to": form.get("to", "").strip(),
                              "provider": form.get("provider") or None, "tasks": form.get("tasks", "").strip() or None,
                              "node_group": form.get("node_group", "").strip() or None,
                              "bypass_dnd": form.get("bypass_dnd") == "1"}
    for name, unit in (("throttle_s", 1_000), ("after_min", 60_000)):
        raw = form.get(name, "").strip()
        values[name] = raw
        if raw:
            whole = raw.isascii() and raw.isdigit() and len(raw) < 9  # "²" is a digit to isdigit, not to int
            values[name.rsplit("_", 1)[0] + "_ms"] = int(raw) * unit if whole else raw
    return values


def _rule_fields(values: dict[str, Any]) -> dict[str, Any]:
    keep = ("name", "events", "template", "to", "provider", "tasks", "node_group", "bypass_dnd", "throttle_ms",
            "after_ms")
    return {k: values[k] for k in keep if k in values}


def _field(exc: ReachConfigError) -> str:
    """The form field a rule error belongs to (``alerts.<name>.to`` -> ``to``)."""
    last = exc.field.rsplit(".", 1)[-1].split("[")[0]
    return {"throttle_ms": "throttle_s", "after_ms": "after_min"}.get(last, last)


@bp.get("/rules/new")
@require_role("admin", globally=True)
def new_rule() -> ResponseReturnValue:
    return _form("create", {"events": [], "throttle_s": "600", "after_min": "10"}, {})


@bp.post("/rules/new")
@require_role("admin", globally=True)
def create_rule() -> ResponseReturnValue:
    values = _posted()
    try:
        rule = _reach().alerts.save_rule(_rule_fields(values))
    except ReachConfigError as exc:
        return _form("create", values, {_field(exc): exc.message.removeprefix(f"{exc.field}: ")}, 400)
    except ReachError as exc:
        return _form("create", values, {"name": exc.message}, 409)
    record_action("alert_rule.create", rule.name, after=rule.to_json())
    flash(f"Alert rule {rule.name} created.", "success")
    return redirect(url_for("alerts.index")), 303


def _stored_or_404(name: str) -> tuple[AlertRule, int]:
    version = _reach().alerts.stored_versions().get(name)
    rule = next((r for r in _reach().alerts.rules() if r.name == name), None)
    if version is None or rule is None:
        abort(404, f"No stored alert rule named {name!r} (configured rules are read-only).")
    return rule, version


@bp.get("/rules/edit/<path:name>")
@require_role("admin", globally=True)
def edit_rule(name: str) -> ResponseReturnValue:
    rule, version = _stored_or_404(name)
    values = {**rule.to_json(), "throttle_s": str(rule.throttle_ms // 1000), "after_min": str(rule.after_ms // 60_000),
              "updated_at": version}
    return _form("edit", values, {})


@bp.post("/rules/edit/<path:name>")
@require_role("admin", globally=True)
def update_rule(name: str) -> ResponseReturnValue:
    before, _ = _stored_or_404(name)
    values = {**_posted(), "name": name}
    expected = posted_version()
    if expected is None:
        return _form("edit", values, {"form": "The form is missing the rule's version; reload the page."}, 400)
    try:
        rule = _reach().alerts.save_rule(_rule_fields(values), expected)
    except ReachConfigError as exc:
        return _form("edit", {**values, "updated_at": expected},
                     {_field(exc): exc.message.removeprefix(f"{exc.field}: ")}, 400)
    except ReachError:
        flash(f"Alert rule {name} changed since you opened it; nothing was saved. Check it and try again.", "error")
        return redirect(url_for("alerts.edit_rule", name=name)), 303
    record_action("alert_rule.update", name, before=before.to_json(), after=rule.to_json())
    flash(f"Alert rule {name} saved.", "success")
    return redirect(url_for("alerts.index")), 303


@bp.post("/rules/delete/<path:name>")
@require_role("admin", globally=True)
def delete_rule(name: str) -> ResponseReturnValue:
    rule, _ = _stored_or_404(name)
    expected = posted_version()
    if expected is None:
        abort(400, "The form is missing the rule's version; reload the page.")
    try:
        _reach().alerts.delete_rule(name, expected)
    except ReachError:
        flash(f"Alert rule {name} changed since you opened it; nothing was deleted.", "error")
        return redirect(url_for("alerts.index")), 303
    record_action("alert_rule.delete", name, before=rule.to_json())
    flash(f"Alert rule {name} deleted.", "success")
    return redirect(url_for("alerts.index")), 303


@bp.post("/rules/test/<path:name>")
@require_role("admin", globally=True)
def test_rule(name: str) -> ResponseReturnValue:
    reach = _reach()
    if not any(r.name == name for r in reach.alerts.rules()):
        abort(404, f"No alert rule named {name!r}.")
    queue_id = reach.alerts.send_test(name)
    with contextlib.suppress(ReachError):  # no queue: it stays queued for a node that has one
        reach.run_round()  # deliver it now (a round already running on this node delivers it instead)
    entry = reach.queue.get(queue_id)
    record_action("alert_rule.test", name, after={"queue_id": queue_id, "status": entry.status if entry else None})
    flash(f"Test alert of {name} queued as {queue_id} ({entry.status if entry else 'queued'}).", "success")
    return redirect(url_for("alerts.index")), 303
