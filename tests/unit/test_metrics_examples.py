"""The examples in examples/: the Grafana dashboard is valid JSON whose every query names a metric
/metrics exports, and the Prometheus scrape configuration points at /metrics with a bearer token."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from scheduler_core.runtime.metrics import COUNTER_NAMES, METRIC_NAMES

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count", "_total")  # (and a counter's samples)
PROMQL_WORDS = {"sum", "by", "min", "max", "topk", "histogram_quantile", "le", "rate", "increase", "without", "avg"}


def _exported(name: str) -> bool:
    return name in METRIC_NAMES or any(name.endswith(s) and name.removesuffix(s) in METRIC_NAMES
                                       for s in HISTOGRAM_SUFFIXES)


def test_every_dashboard_query_names_an_exported_metric() -> None:
    dashboard = json.loads((EXAMPLES / "grafana-dashboard.json").read_text(encoding="utf-8"))
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(exprs) >= 10
    for expr in exprs:
        without_labels = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\b(?:by|without)\s*\([^)]*\)", "", expr)  # matchers, ranges, by
        names = [word for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", without_labels) if word not in PROMQL_WORDS]
        assert names, expr
        assert all(_exported(name) for name in names), (expr, [n for n in names if not _exported(n)])
    shown = {re.sub(r"_(?:bucket|total)$", "", name) for expr in exprs for name in re.findall(r"hai_[a-z0-9_]+", expr)}
    # The panels count with rate() / increase() over the counters; the windowed gauges beside them
    # (the last 24 hours, the last hour's lateness) say the same for a reader without Prometheus.
    windowed = {name for name in METRIC_NAMES if name.endswith(("_last_24h", "_last_hour_occurrences"))}
    assert set(COUNTER_NAMES) <= shown, set(COUNTER_NAMES) - shown
    assert shown >= set(METRIC_NAMES) - {"hai_tasks", "hai_tasks_managed"} - windowed, set(METRIC_NAMES) - shown


def test_the_scrape_configuration_reads_metrics_with_a_token() -> None:
    config = yaml.safe_load((EXAMPLES / "prometheus.yml").read_text(encoding="utf-8"))
    [job] = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics" and job["authorization"]["type"] == "Bearer"
    assert "credentials" not in job["authorization"]  # a file, never the token itself
