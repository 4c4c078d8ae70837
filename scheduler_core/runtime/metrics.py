"""Prometheus metrics from what the database knows (``/metrics`` serves them; see README "Metrics").

A custom collector: each scrape reads one ``MetricsSnapshot`` (store/metrics.py, one read
transaction) and turns it into metric families. Nothing is counted in process memory, so every
gunicorn worker (and every node) answers a scrape alike and no multiprocess directory is needed.

Counters (``..._total`` and the ``hai_fire_lateness_seconds`` histogram) come from
``metric_totals`` (store/totals.py): totals the writers add to in the transaction that makes the
transition, never deleted, so each only grows -- across workers, restarts and journal retention.
The windowed gauges (``..._last_24h``, ``..._last_hour_...``) beside them read the journal.

A task has its own counter series when it is among the first ``MAX_TASK_SERIES`` tasks ever
counted (by its first count's time, then id); every later task counts under ``task="_other"``
of its team (every per-task series has a ``team`` label: the team it is in now).
A team's scrape (``render(scope)``) holds the series of its teams only, the same as every team's
scrape has for them, and counts of what they see (docs/teams.md).
That order never changes once a task is counted, and counted tasks are never forgotten: a task
outside the first 100 stays outside, so ``_other`` only ever gains members, and a task inside
keeps its series (after it is deleted too). Choosing the busiest tasks instead would move a task
out of ``_other`` when it became busy, and ``_other`` would go down.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine

from scheduler_core.access import EVERY_TEAM, Scope
from scheduler_core.errors import SchedulerError
from scheduler_core.store.metrics import MetricsRepository, MetricsSnapshot
from scheduler_core.store.totals import (
    DELIVERIES,
    EXECUTIONS,
    INF,
    LATENESS,
    LATENESS_BUCKETS_MS,
    LATENESS_SUM,
    MISSED,
    TAKEOVERS,
)

MAX_TASK_SERIES = 100  # tasks with their own series; the rest share task="_other"
OTHER_TASKS = "_other"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_TASK_GAUGES = (
    ("hai_tasks", "Tasks defined.", "tasks"),
    ("hai_tasks_paused", "Tasks paused now (no cron occurrences until resumed).", "tasks_paused"),
    ("hai_tasks_disabled", "Tasks disabled.", "tasks_disabled"),
    ("hai_tasks_blocked", "Tasks whose slot is held by an unknown execution (waiting for an operator).",
     "tasks_blocked"),
    ("hai_tasks_managed", "Tasks created by a task file (hai-scheduler tasks apply).", "tasks_managed"),
    ("hai_log_writes_pending", "Executions whose attempt logs are journaled but not yet written (repairable).",
     "log_writes_pending"),
)
_TASK_COUNTERS: tuple[tuple[str, str, str, str | None], ...] = (  # metric, family (no _total), help, label
    (EXECUTIONS, "hai_executions", "Executions that reached a terminal status or unknown, by task, team and "
     "status (an operator's verdict on an unknown one counts again under its status).", "status"),
    (TAKEOVERS, "hai_lease_takeovers", "Ownership takeovers (a lease lost, another node went on), by task and team.",
     None),
    (MISSED, "hai_missed_occurrences", "Occurrences journaled missed (no node ran them), by task and team.", None),
)
# Counter families by name; their samples end in _total (the text parsers name a family without it).
COUNTER_NAMES = (*(name for _, name, _, _ in _TASK_COUNTERS), "hai_notification_deliveries",
                 "hai_fire_lateness_seconds")
METRIC_NAMES = (
    "hai_database_up", "hai_executions_last_24h", "hai_lease_takeovers_last_24h", "hai_executions_open",
    *(name for name, _, _ in _TASK_GAUGES), "hai_notification_queue", "hai_notification_dead_letters",
    "hai_notification_deliveries_last_24h", "hai_node_heartbeat_age_seconds", "hai_node_tick_duration_seconds",
    "hai_fire_lateness_last_hour_occurrences", *COUNTER_NAMES,
)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _by_task(snapshot: MetricsSnapshot) -> dict[tuple[str, str, str], int]:
    """Executions by (task, team, status), the busiest ``MAX_TASK_SERIES`` tasks by name, the
    rest as ``_other`` of their team: a scrape's series stay bounded however many tasks there are."""
    volume: dict[str, int] = defaultdict(int)
    for task_id, _, _, count, _ in snapshot.executions:
        volume[task_id] += count
    kept = set(sorted(volume, key=lambda task: (-volume[task], task))[:MAX_TASK_SERIES])
    series: dict[tuple[str, str, str], int] = defaultdict(int)
    for task_id, team, status, count, _ in snapshot.executions:
        series[(task_id if task_id in kept else OTHER_TASKS, team, status)] += count
    return series


def _executions(snapshot: MetricsSnapshot) -> Iterator[Metric]:
    window = GaugeMetricFamily("hai_executions_last_24h", "Executions journaled in the last 24 hours, by task, "
                               "team and status (the busiest 100 tasks; the others as task=\"_other\").",
                               labels=["task", "team", "status"])
    for (task, team, status), count in sorted(_by_task(snapshot).items()):
        window.add_metric([task, team, status], count)
    yield window
    yield _gauge("hai_lease_takeovers_last_24h", "Ownership takeovers (a lease lost, another node went on) of "
                 "executions journaled in the last 24 hours.", sum(row[4] for row in snapshot.executions))
    open_rows = GaugeMetricFamily("hai_executions_open", "Executions not finished, by status (unknown ones keep "
                                  "their task's slot until an operator decides).", labels=["status"])
    for status in ("unknown", "running", "queued"):
        open_rows.add_metric([status], snapshot.counts[f"executions_{status}"])
    yield open_rows


def _notifications(snapshot: MetricsSnapshot) -> Iterator[Metric]:
    queue = GaugeMetricFamily("hai_notification_queue", "Notifications in the delivery queue not yet settled, by "
                              "status.", labels=["status"])
    for status in ("pending", "processing", "sending", "unknown", "dead"):
        queue.add_metric([status], snapshot.queue.get(status, 0))
    yield queue
    yield _gauge("hai_notification_dead_letters", "Notifications that gave up (dead): requeue or discard them.",
                 snapshot.queue.get("dead", 0))
    deliveries = GaugeMetricFamily("hai_notification_deliveries_last_24h", "Deliveries that ended in the last 24 "
                                   "hours, by provider and outcome.", labels=["provider", "outcome"])
    for provider, outcome, count in sorted(snapshot.deliveries):
        deliveries.add_metric([provider, outcome], count)
    yield deliveries


def _nodes(snapshot: MetricsSnapshot) -> Iterator[Metric]:
    age = GaugeMetricFamily("hai_node_heartbeat_age_seconds", "Seconds since each node's last heartbeat (DB "
                            "clock; nodes seen in the last 24 hours).", labels=["node", "stopped"])
    tick = GaugeMetricFamily("hai_node_tick_duration_seconds", "How long each node's previous tick took, as "
                             "reported with its last heartbeat.", labels=["node"])
    for node in sorted(snapshot.nodes, key=lambda n: n.node_id):
        age.add_metric([node.node_id, str(node.stopped).lower()], max(0, snapshot.now_ms - node.last_seen_at) / 1000)
        if node.last_tick_ms is not None:
            tick.add_metric([node.node_id], node.last_tick_ms / 1000)
    yield age
    yield tick


def _lateness_window(snapshot: MetricsSnapshot) -> Metric:
    late = snapshot.lateness
    window = GaugeMetricFamily("hai_fire_lateness_last_hour_occurrences", "Cron occurrences of the last hour "
                               "whose first attempt started within this many seconds of the scheduled minute.",
                               labels=["within_seconds"])
    for bound, count in late.buckets:
        window.add_metric([str(bound / 1000)], count)
    window.add_metric([INF], late.count)
    return window


def _counters(snapshot: MetricsSnapshot) -> Iterator[Metric]:
    """The counters, from ``metric_totals`` summed per series in SQL (tasks past the first
    ``MAX_TASK_SERIES`` counted already as ``_other``: see the module docstring)."""
    series: dict[str, dict[tuple[str, ...], int]] = defaultdict(lambda: defaultdict(int))
    for metric, scope, label, team, value in snapshot.totals:
        series[metric][(scope, team, label)] += value
    for metric, name, documentation, label_name in _TASK_COUNTERS:
        labels = ["task", "team", label_name] if label_name else ["task", "team"]
        family = CounterMetricFamily(name, documentation, labels=labels)
        for (task, team, label), value in sorted(series[metric].items()):
            family.add_metric([task, team, label] if label_name else [task, team], value)
        yield family
    deliveries = CounterMetricFamily("hai_notification_deliveries", "Deliveries that ended, by provider and "
                                     "outcome (an operator's verdict on an unknown one counts again).",
                                     labels=["provider", "outcome"])
    for (provider, _, outcome), value in sorted(series[DELIVERIES].items()):
        deliveries.add_metric([provider, outcome], value)
    yield deliveries
    yield _lateness(series[LATENESS])


def _lateness(totals: dict[tuple[str, ...], int]) -> Metric:
    """The all-time histogram: each task's bucket rows hold the occurrences in that bucket only,
    summed over tasks and made cumulative here."""
    by_bucket: dict[str, int] = defaultdict(int)
    for (_, _, label), value in totals.items():
        by_bucket[label] += value
    buckets, running = [], 0
    for label in (*(str(bound) for bound in LATENESS_BUCKETS_MS), INF):
        running += by_bucket[label]
        buckets.append((label if label == INF else str(int(label) / 1000), running))
    return HistogramMetricFamily("hai_fire_lateness_seconds", "Seconds from a cron occurrence's scheduled minute "
                                 "to its first attempt's start, counted when the attempt begins.",
                                 buckets=buckets, sum_value=by_bucket[LATENESS_SUM] / 1000)


class DatabaseCollector(Collector):
    """Reads the database on each scrape (never caches): every worker reports the same figures;
    ``scope``'s figures only (every team's by default)."""

    def __init__(self, engine: Engine, scope: Scope = EVERY_TEAM) -> None:
        self.repository = MetricsRepository(engine)
        self.scope = scope

    def collect(self) -> Iterable[Metric]:
        try:
            snapshot = self.repository.snapshot(MAX_TASK_SERIES, OTHER_TASKS, self.scope)
        except SchedulerError:  # the database does not answer: say so, and nothing else
            yield _gauge("hai_database_up", "Whether the database answered this scrape.", 0)
            return
        yield _gauge("hai_database_up", "Whether the database answered this scrape.", 1)
        yield from _executions(snapshot)
        for name, documentation, key in _TASK_GAUGES:
            yield _gauge(name, documentation, snapshot.counts[key])
        yield from _notifications(snapshot)
        yield from _nodes(snapshot)
        yield _lateness_window(snapshot)
        yield from _counters(snapshot)


class Metrics:
    """The exposition of one engine's metrics: ``render(scope)`` is a scrape's body, every team's
    figures by default, a team's scrape those of the teams in ``scope``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def registry(self, scope: Scope = EVERY_TEAM) -> CollectorRegistry:
        """A registry of one collector of ``scope``'s figures (a scrape's; OpenMetrics may render it too)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(DatabaseCollector(self.engine, scope))
        return registry

    def render(self, scope: Scope = EVERY_TEAM) -> bytes:
        return generate_latest(self.registry(scope))
