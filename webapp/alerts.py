"""Alerts: the alerts raised with their delivery status, and the rules (configured ones read-only,
stored ones edited by admins, with a test alert). Everything goes through ``reach.alerts``.

A team member sees their teams' rules and the alerts about their teams' tasks; a team's admin
makes, edits, tests and deletes its rules. A global rule (no team) is a global admin's
(docs/teams.md): another team's rule answers as one that does not exist."""

from __future__ import annotations

import contextlib
from typing import Any

from flask import Blueprint, abort, current_app, flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from scheduler_core.errors import ReachConfigError, ReachError
from scheduler_core.reach import Reach
from scheduler_core.reach.alert_rules import ALERT_VARIABLES, TEAM_EVENTS, AlertEvent, AlertRule
from scheduler_core.reach.alerts import covered
from webapp.audit import record_action
from webapp.auth import require_role
from webapp.forms import posted_version
from webapp.node import reach_of, scheduler_of
from webapp.team_scope import team_choices

bp = Blueprint("alerts", __name__, url_prefix="/notifications/alerts")
RECENT = 50
TASKS_SAMPLED = 10_000  # a rule's glob is checked against at most this many task ids


def _reach() -> Reach:
    return reach_of(current_app)


@bp.get("/")
def index() -> ResponseReturnValue:
    reach, scope = _reach(), g.user.access.scope()
    rules = reach.alerts.rules(scope)
    configured = {r.name for r in reach.alerts.configured()}
    tasks = [(t.id, t.team) for t in scheduler_of(current_app).tasks if scope.allows(t.team)][:TASKS_SAMPLED]
    shown = {r.name for r in rules}
    versions = {name: v for name, v in reach.alerts.stored_versions().items() if name in shown}
    return render_template("alerts/index.html", rules=rules, configured=configured,
                           alerts=reach.alerts.recent(RECENT, scope), matches=covered(rules, tasks), versions=versions)


# --- stored rules ----------------------------------------------------------------------------------


def _form(mode: str, values: dict[str, Any], errors: dict[str, str], status: int = 200) -> ResponseReturnValue:
    reach = _reach()
    templates = sorted({t.name for t in reach.configured_templates()} | {t.name for t in reach.templates.stored()})
    teams = team_choices(g.user.access, values.get("team"))
    return render_template("alerts/form.html", mode=mode, values=values, errors=errors, events=list(AlertEvent),
                           templates=templates, providers=reach.provider_names(), variables=ALERT_VARIABLES,
                           teams=teams, team_events=TEAM_EVENTS,
                           global_ok=g.user.can_globally("admin")), status


def _posted() -> dict[str, Any]:
    form = request.form
    values: dict[str, Any] = {"name": form.get("name", "").strip(), "events": form.getlist("events"),
                              "template": form.get("template", ""), "to": form.get("to", "").strip(),
                              "provider": form.get("provider") or None, "tasks": form.get("tasks", "").strip() or None,
                              "node_group": form.get("node_group", "").strip() or None,
                              "bypass_dnd": form.get("bypass_dnd") == "1", "team": form.get("team", "").strip() or None}
    for name, unit in (("throttle_s", 1_000), ("after_min", 60_000)):
        raw = form.get(name, "").strip()
        values[name] = raw
        if raw:
            whole = raw.isascii() and raw.isdigit() and len(raw) < 9  # "²" is a digit to isdigit, not to int
            values[name.rsplit("_", 1)[0] + "_ms"] = int(raw) * unit if whole else raw
    return values


def _rule_fields(values: dict[str, Any]) -> dict[str, Any]:
    keep = ("name", "events", "template", "to", "provider", "tasks", "node_group", "bypass_dnd", "throttle_ms",
            "after_ms", "team")
    return {k: values[k] for k in keep if k in values}


def _field(exc: ReachConfigError) -> str:
    """The form field a rule error belongs to (``alerts.<name>.to`` -> ``to``)."""
    last = exc.field.rsplit(".", 1)[-1].split("[")[0]
    return {"throttle_ms": "throttle_s", "after_ms": "after_min"}.get(last, last)


def _placement(team: str | None) -> dict[str, str]:
    """The form's error when the caller may not keep a rule in ``team`` (None: global)."""
    if team is None:
        return {} if g.user.can_globally("admin") else {"team": "Choose one of your teams: a rule without a team "
                                                                "(global) needs the global admin role."}
    return {} if g.user.can("admin", team) else {"team": f"Names no team you are an admin of: {team!r}."}


@bp.get("/rules/new")
@require_role("admin")
def new_rule() -> ResponseReturnValue:
    first = None if g.user.can_globally("admin") else next(iter(team_choices(g.user.access)), None)
    return _form("create", {"events": [], "throttle_s": "600", "after_min": "10", "team": first}, {})


@bp.post("/rules/new")
@require_role("admin")
def create_rule() -> ResponseReturnValue:
    values = _posted()
    errors = _placement(values["team"])
    if errors:
        return _form("create", values, errors, 400)
    try:
        rule = _reach().alerts.save_rule(_rule_fields(values))
    except ReachConfigError as exc:
        return _form("create", values, {_field(exc): exc.message.removeprefix(f"{exc.field}: ")}, 400)
    except ReachError as exc:
        return _form("create", values, {"name": exc.message}, 409)
    record_action("alert_rule.create", rule.name, after=rule.to_json(), team=rule.team)
    flash(f"Alert rule {rule.name} created.", "success")
    return redirect(url_for("alerts.index")), 303


def _visible_or_404(name: str) -> AlertRule:
    """The rule when the caller sees it (another team's: 404 as for none); 403 unless they are an
    admin of its team (a global rule: a global admin)."""
    rule = next((r for r in _reach().alerts.rules(g.user.access.scope()) if r.name == name), None)
    if rule is None:
        abort(404, f"No alert rule named {name!r}.")
    if not g.user.access.may("admin", rule.team):
        abort(403, "This needs the admin role in the rule's team" + ("." if rule.team else " (a global rule)."))
    return rule


def _stored_or_404(name: str) -> tuple[AlertRule, int]:
    rule = _visible_or_404(name)
    version = _reach().alerts.stored_versions().get(name)
    if version is None:
        abort(404, f"No stored alert rule named {name!r} (configured rules are read-only).")
    return rule, version


@bp.get("/rules/edit/<path:name>")
@require_role("admin")
def edit_rule(name: str) -> ResponseReturnValue:
    rule, version = _stored_or_404(name)
    values = {**rule.to_json(), "throttle_s": str(rule.throttle_ms // 1000), "after_min": str(rule.after_ms // 60_000),
              "updated_at": version}
    return _form("edit", values, {})


@bp.post("/rules/edit/<path:name>")
@require_role("admin")
def update_rule(name: str) -> ResponseReturnValue:
    before, _ = _stored_or_404(name)
    values = {**_posted(), "name": name}
    expected = posted_version()
    if expected is None:
        return _form("edit", values, {"form": "The form is missing the rule's version; reload the page."}, 400)
    errors = _placement(values["team"])
    if errors:
        return _form("edit", {**values, "updated_at": expected}, errors, 400)
    try:
        rule = _reach().alerts.save_rule(_rule_fields(values), expected, g.user.access.scope("admin"))
    except ReachConfigError as exc:
        return _form("edit", {**values, "updated_at": expected},
                     {_field(exc): exc.message.removeprefix(f"{exc.field}: ")}, 400)
    except ReachError:
        flash(f"Alert rule {name} changed since you opened it; nothing was saved. Check it and try again.", "error")
        return redirect(url_for("alerts.edit_rule", name=name)), 303
    record_action("alert_rule.update", name, before=before.to_json(), after=rule.to_json(),
                  team=rule.team if rule.team == before.team else None)  # moved: its earlier team's details too
    flash(f"Alert rule {name} saved.", "success")
    return redirect(url_for("alerts.index")), 303


@bp.post("/rules/delete/<path:name>")
@require_role("admin")
def delete_rule(name: str) -> ResponseReturnValue:
    rule, _ = _stored_or_404(name)
    expected = posted_version()
    if expected is None:
        abort(400, "The form is missing the rule's version; reload the page.")
    try:
        _reach().alerts.delete_rule(name, expected, g.user.access.scope("admin"))
    except ReachError:
        flash(f"Alert rule {name} changed since you opened it; nothing was deleted.", "error")
        return redirect(url_for("alerts.index")), 303
    record_action("alert_rule.delete", name, before=rule.to_json(), team=rule.team)
    flash(f"Alert rule {name} deleted.", "success")
    return redirect(url_for("alerts.index")), 303


@bp.post("/rules/test/<path:name>")
@require_role("admin")
def test_rule(name: str) -> ResponseReturnValue:
    reach = _reach()
    rule = _visible_or_404(name)
    queue_id = reach.alerts.send_test(name, g.user.access.scope("admin"))
    with contextlib.suppress(ReachError):  # no queue: it stays queued for a node that has one
        reach.run_round()  # deliver it now (a round already running on this node delivers it instead)
    entry = reach.queue.get(queue_id)
    record_action("alert_rule.test", name, after={"queue_id": queue_id, "status": entry.status if entry else None},
                  team=rule.team)
    flash(f"Test alert of {name} queued as {queue_id} ({entry.status if entry else 'queued'}).", "success")
    return redirect(url_for("alerts.index")), 303
