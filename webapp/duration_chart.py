"""The task page's duration chart: the run time of each of the task's last runs (its newest 100
journal rows that ran an attempt), oldest left, with the p50 and p95 lines and failures marked
by a cross above their bar (the mark reads without colour). Server-rendered SVG: geometry here,
drawing in ``templates/tasks/_duration_chart.html``; colours from app.css classes, so both themes
apply."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_core.runtime.schedule_description import RecentRun
from scheduler_core.statuses import ExecutionStatus

RUNS = 100
WIDTH, HEIGHT, TOP, BOTTOM, LEFT = 720, 180, 16, 8, 52
FAILURES = (ExecutionStatus.FAILED, ExecutionStatus.INTERRUPTED, ExecutionStatus.UNKNOWN)


@dataclass(frozen=True)
class RunBar:
    run: RecentRun
    x: float
    width: float
    y: float
    height: float
    failed: bool


@dataclass(frozen=True)
class DurationChart:
    bars: list[RunBar]
    p50_ms: int
    p95_ms: int
    peak_ms: int
    p50_y: float
    p95_y: float
    failures: int
    width: int = WIDTH
    height: int = HEIGHT
    top: int = TOP
    left: int = LEFT

    @property
    def base(self) -> int:
        return HEIGHT - BOTTOM

    @staticmethod
    def label_y(line_y: float) -> float:
        """Where a line's label goes: above it, or below it near the top (the crosses' row)."""
        return round(line_y + 11 if line_y < TOP + 12 else line_y - 3, 2)


def percentile(values: list[int], share: float) -> int:
    """The nearest-rank percentile of ``values`` (not empty)."""
    ordered = sorted(values)
    rank = max(1, -(-int(share * 100) * len(ordered) // 100))
    return ordered[rank - 1]


def duration_chart(newest_first: list[RecentRun]) -> DurationChart | None:
    """The chart of the runs with a duration among ``newest_first``; None when none ran."""
    runs = [run for run in reversed(newest_first) if run.duration_ms is not None]
    if not runs:
        return None
    durations = [max(run.duration_ms or 0, 0) for run in runs]
    peak = max(max(durations), 1)
    plot = HEIGHT - TOP - BOTTOM
    slot = (WIDTH - LEFT) / len(runs)

    def y(ms: int) -> float:
        return round(HEIGHT - BOTTOM - plot * ms / peak, 2)

    bars = [RunBar(run, round(LEFT + i * slot + slot * 0.1, 2), round(max(slot * 0.8, 0.5), 2), y(ms),
                   round(plot * ms / peak, 2), run.status in FAILURES)
            for i, (run, ms) in enumerate(zip(runs, durations, strict=True))]
    p50, p95 = percentile(durations, 0.5), percentile(durations, 0.95)
    return DurationChart(bars, p50, p95, peak, y(p50), y(p95), sum(1 for bar in bars if bar.failed))
