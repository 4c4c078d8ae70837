"""runtime/clock_watch.py: a database clock jump is told from a slow answer."""

from __future__ import annotations

from scheduler_core.runtime.clock_watch import ClockWatch, Reading, jump_tolerance_ms


def _watch(readings: list[tuple[int, float, float]], tolerance: int = 1000) -> list[int | None]:
    watch = ClockWatch(tolerance)
    return [watch.observe(Reading(*reading)) for reading in readings]


def test_steady_clocks_report_nothing() -> None:
    assert _watch([(1_000_000 + i * 1000, i * 1.0, i * 1.0 + 0.002) for i in range(20)]) == [None] * 20


def test_a_jump_ahead_and_back_is_reported_with_its_sign() -> None:
    readings = [(1_000_000, 0.0, 0.001), (1_001_000, 1.0, 1.001), (1_007_000, 2.0, 2.001), (1_008_000, 3.0, 3.001),
                (1_004_000, 4.0, 4.001)]
    assert _watch(readings) == [None, None, 5000, None, -5000]


def test_a_slow_answer_is_not_a_jump() -> None:
    # The database read its clock at 2.0 s, the answer arrived 3 s later: the reading's uncertainty
    # covers it, before and after.
    readings = [(1_000_000, 0.0, 0.001), (1_002_000, 2.0, 5.0), (1_006_000, 6.0, 6.001)]
    assert _watch(readings) == [None, None, None]


def test_the_first_reading_has_nothing_to_compare_with() -> None:
    assert _watch([(9_000_000, 0.0, 0.0)]) == [None]


def test_the_tolerance_is_a_sixth_of_the_lease_within_bounds() -> None:
    assert jump_tolerance_ms(6_000) == 1_000
    assert jump_tolerance_ms(300_000) == 2_000  # the default lease: any jump over 2 s is reported
    assert jump_tolerance_ms(1_000) == 250
