"""The overview page: what needs an operator's attention, at a glance.

Every figure is a link to the page that shows its rows and says its window: open items now
(unknown executions, dead letters, pending log writes), or the last 24 hours (executions by
status, alerts, the newest failures, each a link to its execution). Counts are bounded
(``10,000+``) so the page costs the same with a million journal rows; the counters refresh every
5 s and the chart every minute through fragments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import Blueprint, current_app, g, render_template, url_for
from flask.typing import ResponseReturnValue

from scheduler_core.runtime.execution_operations import COUNT_CAP, HourBucket
from scheduler_core.statuses import ExecutionStatus
from webapp.htmx import wants_fragment
from webapp.node import reach_of, scheduler_of

bp = Blueprint("overview", __name__)
CHART_HOURS = 24
WINDOW_HOURS = 24  # the window of the status counters, the alerts and the failure list
RECENT_FAILURES = 10
# The chart's drawing area, in SVG user units (the CSS scales the whole picture).
CHART_WIDTH, CHART_HEIGHT, CHART_TOP, CHART_BOTTOM, CHART_LEFT = 720, 160, 14, 18, 34


@dataclass(frozen=True)
class Bar:
    """One hour of the chart: a bar for all executions and one inside it for the failures."""

    bucket: HourBucket
    x: float
    width: float
    total_y: float
    total_height: float
    failures_y: float
    failures_height: float


def chart(buckets: list[HourBucket]) -> dict[str, Any]:
    """Geometry of the hourly bar chart (server-rendered SVG: no script, no inline style)."""
    peak = max((b.total for b in buckets), default=0)
    scale_max = max(peak, 1)
    plot_height = CHART_HEIGHT - CHART_TOP - CHART_BOTTOM
    slot = (CHART_WIDTH - CHART_LEFT) / max(len(buckets), 1)
    base = CHART_HEIGHT - CHART_BOTTOM
    bars = []
    for i, bucket in enumerate(buckets):
        total_h = plot_height * bucket.total / scale_max
        fail_h = plot_height * bucket.failures / scale_max
        bars.append(Bar(bucket, round(CHART_LEFT + i * slot + 1, 2), round(slot - 2, 2), round(base - total_h, 2),
                        round(total_h, 2), round(base - fail_h, 2), round(fail_h, 2)))
    ticks = [(round(CHART_LEFT + i * slot, 2), f"-{len(buckets) - i}h") for i in range(0, len(buckets), 6)]
    return {"bars": bars, "peak": peak, "width": CHART_WIDTH, "height": CHART_HEIGHT, "base": base,
            "top": CHART_TOP, "left": CHART_LEFT, "ticks": ticks,
            "total": sum(b.total for b in buckets), "failures": sum(b.failures for b in buckets)}


def _counters() -> dict[str, Any]:
    scheduler = scheduler_of(current_app)
    scope = g.user.access.scope()
    overview = scheduler.execution.overview(scope=scope)
    reach = reach_of(current_app)
    queue = reach.queue.counts(cap=COUNT_CAP, scope=scope)
    alerts = reach.alerts.counts(WINDOW_HOURS, scope)
    return {
        "recent": scheduler.execution.recent(WINDOW_HOURS, RECENT_FAILURES, scope=scope), "window_hours": WINDOW_HOURS,
        "alive_within_s": 3 * scheduler.config.heartbeat_interval_ms // 1000,
        "overview": overview, "statuses": tuple(ExecutionStatus), "dead": queue.get("dead", 0),
        "cluster": reach.alerts.watch_idle(),
        "unknown_deliveries": queue.get("unknown", 0), "count_cap": COUNT_CAP,
        "alerts": sum(alerts.values()), "alerts_undelivered": sum(n for s, n in alerts.items() if s != "sent"),
        "card_links": {"tasks": url_for("tasks.index"),
                  "unknown": url_for("executions.unknown"),
                  "log_failures": url_for("logs.failures"),
                  "dead": url_for("notifications.dead"),
                  "unknown_deliveries": url_for("notifications.unknown"),
                  "nodes": url_for("nodes.index"),
                  "alerts": url_for("alerts.index")},
    }


def _chart() -> dict[str, Any]:
    return {"chart": chart(scheduler_of(current_app).execution.hourly(CHART_HOURS, g.user.access.scope()))}


@bp.get("/")
def index() -> ResponseReturnValue:
    return render_template("overview/index.html", **_counters(), **_chart())


@bp.get("/overview/counters")
def counters() -> ResponseReturnValue:
    """The counters alone for the 5-second refresh (the whole page without HTMX)."""
    if not wants_fragment():
        return index()
    return render_template("overview/_counters.html", **_counters())


@bp.get("/overview/chart")
def hourly_chart() -> ResponseReturnValue:
    """The chart alone for the refresh every minute (the whole page without HTMX)."""
    if not wants_fragment():
        return index()
    return render_template("overview/_chart_hourly.html", **_chart())
