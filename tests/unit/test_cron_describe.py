"""cron.describe: the sentence the dashboard shows beside a schedule.

Three kinds of checks: exact sentences for the common shapes of each field, equal sentences
for equivalent spellings (names, steps, ranges), and agreement with the schedule itself
(the fixed times a sentence lists are the times ``upcoming`` returns for a day).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core.cron import describe, upcoming, validate_cron
from scheduler_core.errors import InvalidCronError


@pytest.mark.parametrize(
    ("expr", "sentence"),
    [
        # fixed times of day
        ("30 2 * * 1-5", "At 02:30, Monday through Friday"),
        ("0 0 * * *", "At 00:00, every day"),
        ("1 0 * * *", "At 00:01, every day"),
        ("30 1,13 * * *", "At 01:30 and 13:30, every day"),
        ("0,30 9 * * *", "At 09:00 and 09:30, every day"),
        ("*/20 9 * * *", "At 09:00, 09:20 and 09:40, every day"),
        ("0 1-3,9 * * *", "At 01:00, 02:00, 03:00 and 09:00, every day"),
        ("45 23 * * *", "At 23:45, every day"),
        # minutes
        ("* * * * *", "Every minute"),
        ("*/15 * * * *", "Every 15 minutes"),
        ("*/30 * * * *", "Every 30 minutes"),
        ("5 * * * *", "At 5 minutes past the hour"),
        ("1 * * * *", "At 1 minute past the hour"),
        ("5-10 * * * *", "Every minute from 5 through 10 minutes past the hour"),
        ("5-59/15 * * * *", "Every 15 minutes, starting at 5 minutes past the hour"),
        ("0-30/10 * * * *", "Every 10 minutes from 0 through 30 minutes past the hour"),
        ("0,7,45 * * * *", "At 0, 7 and 45 minutes past the hour"),
        ("0-5,30 * * * *", "At 0-5 and 30 minutes past the hour"),
        # hours
        ("0 * * * *", "Every hour"),
        ("0 */2 * * *", "Every 2 hours"),
        ("0 5/2 * * *", "Every 2 hours from 05:00 through 23:00"),
        ("0 1-19/3 * * *", "Every 3 hours from 01:00 through 19:00"),
        ("0 0-8 * * *", "Every hour from 00:00 through 08:00"),
        ("*/5 9 * * *", "Every 5 minutes, between 09:00 and 09:59"),
        ("15 9-17 * * *", "At 15 minutes past the hour, between 09:00 and 17:59"),
        ("* */6 * * *", "Every minute, every 6 hours"),
        ("*/15 9,17 * * *", "Every 15 minutes, during 09:00-09:59 and 17:00-17:59"),
        # days of the month
        ("0 0 1 * *", "At 00:00, on day 1 of the month"),
        ("0 0 1,15 * *", "At 00:00, on days 1 and 15 of the month"),
        ("0 0 1-7 * *", "At 00:00, on days 1 through 7 of the month"),
        ("0 0 L * *", "At 00:00, on the last day of the month"),
        ("0 0 1,L * *", "At 00:00, on day 1 and the last day of the month"),
        ("0 0 */2 * *", "At 00:00, on every 2nd day of the month"),
        ("0 0 2/3 * *", "At 00:00, on every 3rd day of the month, starting on day 2"),
        ("0 0 15W * *", "At 00:00, on the weekday nearest day 15 of the month"),
        # days of the week
        ("0 0 * * 0", "At 00:00, only on Sunday"),
        ("0 0 * * 0,6", "At 00:00, only on Saturday and Sunday"),
        ("0 0 * * 1-6/2", "At 00:00, only on Monday, Wednesday and Friday"),
        ("0 0 * * 5#2", "At 00:00, on the second Friday of the month"),
        ("0 0 * * L5", "At 00:00, on the last Friday of the month"),
        # cron's OR rule when both day fields are restricted
        ("0 0 1 * 1", "At 00:00, on day 1 of the month or on Monday"),
        ("0 12 1-7 * 1-5", "At 12:00, on days 1 through 7 of the month or Monday through Friday"),
        # months
        ("0 0 1 1 *", "At 00:00, on day 1 of the month, only in January"),
        ("0 12 * 1,4,7,10 *", "At 12:00, only in January, April, July and October"),
        ("0 0 1 */2 *", "At 00:00, on day 1 of the month, every 2 months"),
        ("0 0 * jan-mar *", "At 00:00, January through March"),
        ("0 0 29 2 *", "At 00:00, on day 29 of the month, only in February"),
        # macros
        ("@hourly", "Every hour"),
        ("@daily", "At 00:00, every day"),
        ("@midnight", "At 00:00, every day"),
        ("@weekly", "At 00:00, only on Sunday"),
        ("@monthly", "At 00:00, on day 1 of the month"),
        ("@yearly", "At 00:00, on day 1 of the month, only in January"),
        ("@annually", "At 00:00, on day 1 of the month, only in January"),
    ],
)
def test_sentences(expr: str, sentence: str) -> None:
    assert describe(expr) == sentence


@pytest.mark.parametrize(
    "spellings",
    [
        ("30 2 * * 1-5", "30 2 * * mon-fri", "30 2 * * MON-FRI", "  30  2 * *  1,2,3,4,5 ", "30 02 * * 1-5"),
        ("*/15 * * * *", "0,15,30,45 * * * *", "0-59/15 * * * *"),
        ("* * * * *", "0-59 * * * *", "*/1 * * * *", "* * * * 0-7", "* * * * 1-7", "* * ? * *"),
        ("0 0 * * 0", "0 0 * * 7", "0 0 * * sun", "@weekly", "@WEEKLY"),
        ("0 0 1 1 *", "0 0 1 jan *", "@yearly", "@annually"),
        ("0 0 * * 1-5", "0 0 * * mon,tue,wed,thu,fri"),
    ],
)
def test_equivalent_spellings_read_the_same(spellings: tuple[str, ...]) -> None:
    assert len({describe(expr) for expr in spellings}) == 1


@pytest.mark.parametrize("expr", ["", "   ", "* * * *", "* * * * * *", "61 * * * *", "* 24 * * *", "0 0 30 2 *",
                                  "@reboot", "@every 5m", "nonsense", "0 0 * * 8"])
def test_invalid_expressions_are_refused_like_validate_cron(expr: str) -> None:
    with pytest.raises(InvalidCronError) as refused:
        describe(expr)
    with pytest.raises(InvalidCronError) as validated:
        validate_cron(expr)
    assert refused.value.message == validated.value.message


def test_not_a_string_is_refused() -> None:
    with pytest.raises(InvalidCronError):
        describe(None)  # type: ignore[arg-type]


def _day_fires(expr: str) -> list[str]:
    """Every fire time (HH:MM, UTC) on 2025-06-02, a Monday in a month of 30 days."""
    start = int(datetime(2025, 6, 2, tzinfo=UTC).timestamp() * 1000)
    fires = upcoming(expr, "UTC", start - 1, 200)
    return [datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M") for ms in fires if ms < start + 86_400_000]


@pytest.mark.parametrize("expr", ["30 2 * * 1-5", "30 1,13 * * *", "*/20 9 * * *", "0 1-3,9 * * *", "0,30 9 * * *",
                                  "45 23 * * *", "5 4,16 * * 1"])
def test_listed_times_are_the_times_the_schedule_fires(expr: str) -> None:
    sentence = describe(expr)
    assert sentence.startswith("At ")
    listed = re.findall(r"\d\d:\d\d", sentence)
    assert listed == _day_fires(expr)


@pytest.mark.parametrize(("expr", "per_day"), [("*/15 * * * *", 96), ("0 */2 * * *", 12), ("0 5/2 * * *", 10),
                                               ("*/5 9 * * *", 12), ("15 9-17 * * *", 9)])
def test_counting_sentences_match_the_fires_of_a_day(expr: str, per_day: int) -> None:
    describe(expr)  # the sentence exists; the count is what it promises
    assert len(_day_fires(expr)) == per_day


_FIELD = st.one_of(
    st.just("*"),
    st.integers(0, 5).map(str),
    st.tuples(st.integers(0, 3), st.integers(4, 6)).map(lambda r: f"{r[0]}-{r[1]}"),
    st.integers(2, 5).map(lambda n: f"*/{n}"),
    st.lists(st.integers(0, 6), min_size=2, max_size=4, unique=True).map(lambda v: ",".join(map(str, v))),
)


@settings(max_examples=300, deadline=None)
@given(st.tuples(_FIELD, _FIELD, _FIELD, _FIELD, _FIELD))
def test_every_valid_expression_gets_a_sentence(fields: tuple[str, ...]) -> None:
    minute, hour, dom, month, dow = fields
    # Shift day-of-month and month values into their ranges (they start at 1).
    expr = " ".join((minute, hour, _from_one(dom), _from_one(month), dow))
    try:
        validate_cron(expr)
    except InvalidCronError:
        with pytest.raises(InvalidCronError):
            describe(expr)
        return
    sentence = describe(expr)
    assert sentence and sentence[0].isupper() and "  " not in sentence and not sentence.endswith(",")


def _from_one(field: str) -> str:
    if field.startswith("*"):
        return field
    return re.sub(r"\d+", lambda m: str(int(m.group()) + 1), field)


@pytest.mark.parametrize(
    ("expr", "sentence"),
    [
        # every ordinal the sentences use: the teens take "th", the twenties "st", "nd", "rd"
        ("0 0 */11 * *", "At 00:00, on every 11th day of the month"),
        ("0 0 */12 * *", "At 00:00, on every 12th day of the month"),
        ("0 0 */13 * *", "At 00:00, on every 13th day of the month"),
        ("0 0 */21 * *", "At 00:00, on every 21st day of the month"),
        ("0 0 */22 * *", "At 00:00, on every 22nd day of the month"),
        ("0 0 */23 * *", "At 00:00, on every 23rd day of the month"),
        ("0 0 * * 1#1", "At 00:00, on the first Monday of the month"),
        ("0 0 * * 1#3", "At 00:00, on the third Monday of the month"),
        ("0 0 * * 1#4", "At 00:00, on the fourth Monday of the month"),
        ("0 0 * * 1#5", "At 00:00, on the fifth Monday of the month"),
        # a list of hours with a run in it
        ("*/15 9-11,17 * * *", "Every 15 minutes, during 09:00-11:59 and 17:00-17:59"),
    ],
)
def test_ordinals_and_hour_runs(expr: str, sentence: str) -> None:
    assert describe(expr) == sentence
