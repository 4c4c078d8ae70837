"""A cron expression croniter refuses is reported by field: which one (its name and position),
the value as typed, and what the field takes -- never croniter's "[*/5 * * * mno] is not
acceptable", which leaves the reader to find the typo."""

from __future__ import annotations

import pytest

from scheduler_core.cron import validate_cron
from scheduler_core.errors import InvalidCronError

# (name, what the message says the field takes, values croniter refuses in that field)
FIELDS = (
    ("minute", "0-59", ("60", "mno", "1,,2", "a-b", "?")),
    ("hour", "0-23", ("24", "noon", "-1")),
    ("day-of-month", "1-31", ("0", "32", "first")),
    ("month", "1-12 or JAN-DEC", ("0", "13", "foo")),
    ("day-of-week", "0-6 or SUN-SAT", ("8", "mno", "1L")),
)
CASES = [(position, name, takes, bad) for position, (name, takes, values) in enumerate(FIELDS)
         for bad in values]


@pytest.mark.parametrize(("position", "name", "takes", "bad"), CASES,
                         ids=[f"{name}={bad}" for _, name, _, bad in CASES])
def test_each_field_with_a_bad_value_is_named_with_what_it_takes(position: int, name: str, takes: str,
                                                                  bad: str) -> None:
    fields = ["*/5", "*", "*", "*", "*"]
    fields[position] = bad
    expr = " ".join(fields)
    with pytest.raises(InvalidCronError) as caught:
        validate_cron(expr)
    message = str(caught.value)
    assert f"the {name} field (field {position + 1}) {bad!r} is not acceptable: {name} takes {takes}" in message
    assert "[" not in message  # croniter's own text quotes the expression in brackets


def test_the_reported_typo_reads_as_the_issue_asks() -> None:
    with pytest.raises(InvalidCronError) as caught:
        validate_cron("*/5 * * * mno")
    assert str(caught.value).endswith(
        "cron: '*/5 * * * mno' is not a valid expression: the day-of-week field (field 5) 'mno' is not acceptable: "
        "day-of-week takes 0-6 or SUN-SAT (7 is Sunday too), 5#2 (the second Friday) or ?")


def test_the_first_bad_field_is_named_when_several_are_bad() -> None:
    with pytest.raises(InvalidCronError, match=r"the hour field \(field 2\) '25'"):
        validate_cron("0 25 * 13 *")


def test_a_day_that_never_occurs_in_its_month_keeps_the_pair_in_the_message() -> None:
    # Each field is valid alone: the message is about the pair, not one field.
    with pytest.raises(InvalidCronError, match=r"Day\(s\) \[30\] can never occur in month\(s\) \[2\]"):
        validate_cron("0 0 30 2 *")


@pytest.mark.parametrize("expr", ["* * * * 7", "0 9 L * *", "0 9 * * 5#2", "0 9 ? * MON-FRI", "*/5 1-3 1,15 JAN *"])
def test_the_values_the_messages_promise_are_accepted(expr: str) -> None:
    assert validate_cron(expr)
