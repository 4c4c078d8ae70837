"""Describing a schedule in words: the sentence the dashboard shows beside an expression.

``describe`` reads the expression the way croniter expands it (names, steps, ranges and
lists all become sets of values), so equivalent spellings get the same sentence, and
the sentence says what the schedule does rather than how it is written.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from croniter import croniter

from scheduler_core.cron.expressions import MACROS, parse

__all__ = ["describe"]

_FIELD_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
_WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_ORDINALS = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}
_MAX_LISTED_TIMES = 6  # more fixed times than this read better as minute and hour clauses
_MAX_LISTED_MONTHS = 4
_NEAREST_WEEKDAY = re.compile(r"^(\d{1,2})W$", re.IGNORECASE)

# A field's values as a shape: ("any",), ("one", v), ("range", a, b), ("step", n, first, last | None)
# where None means "to the end of the field", or ("list", [v | (a, b), ...]).
_Shape = tuple[Any, ...]


def describe(expr: str) -> str:
    """A sentence saying when ``expr`` fires, in 24-hour wall-clock time of the task's zone.

    ``describe("30 2 * * 1-5") == "At 02:30, Monday through Friday"``. Raises
    :class:`InvalidCronError` for anything :func:`validate_cron` refuses. When both the
    day of month and the day of week are restricted the schedule fires on either (cron's
    OR rule), and the sentence says "or".
    """
    schedule = parse(expr)
    five = MACROS.get(schedule.expr, schedule.expr)
    expanded, nth = croniter.expand(five, strict=True)
    shapes = [_shape(values, low, high) for values, (low, high) in zip(expanded, _FIELD_BOUNDS, strict=True)]
    minute, hour, dom, month, dow = shapes
    time_text, fixed = _time_phrase(minute, hour)
    parts = [time_text, *_day_phrases(dom, dow, nth, five.split()[2]), *_month_phrase(month)]
    if fixed and len(parts) == 1:
        parts.append("every day")
    sentence = ", ".join(part for part in parts if part)
    return sentence[0].upper() + sentence[1:]


def _shape(values: list[Any], low: int, high: int) -> _Shape:
    if values == ["*"]:
        return ("any",)
    numbers = sorted(v for v in values if isinstance(v, int))
    if len(numbers) != len(values):  # "l" (last day of the month) among them: a plain list
        return ("list", [*_runs(numbers), "L"])
    if len(numbers) == 1:
        return ("one", numbers[0])
    steps = {b - a for a, b in itertools.pairwise(numbers)}
    if steps == {1} and len(numbers) >= 3:
        return ("range", numbers[0], numbers[-1])
    if len(steps) == 1 and (step := steps.pop()) > 1:
        if numbers[-1] + step > high and numbers[0] - step < low:  # runs to the end from the start
            return ("step", step, numbers[0], None)
        if len(numbers) >= 3:
            return ("step", step, numbers[0], numbers[-1])
    return ("list", _runs(numbers))


def _runs(numbers: list[int]) -> list[Any]:
    """[1, 2, 3, 7] -> [(1, 3), 7]: runs of three or more consecutive values become ranges."""
    items: list[Any] = []
    start = 0
    for index in range(1, len(numbers) + 1):
        if index == len(numbers) or numbers[index] != numbers[index - 1] + 1:
            run = numbers[start:index]
            items.extend([(run[0], run[-1])] if len(run) >= 3 else run)
            start = index
    return items


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _clock(hour: int, minute: int = 0) -> str:
    return f"{hour:02d}:{minute:02d}"


def _time_phrase(minute: _Shape, hour: _Shape) -> tuple[str, bool]:
    """The time of day, and whether it is a list of fixed times ("At 02:30")."""
    minutes, hours = _expand_items(minute, 59), _expand_items(hour, 23)
    if minutes and hours and len(minutes) * len(hours) <= _MAX_LISTED_TIMES:
        return "At " + _join([_clock(h, m) for h in hours for m in minutes]), True
    if minute == ("one", 0) and hour[0] in ("any", "step", "range"):
        return _whole_hours(hour), False
    hour_text = _hour_clause(hour)
    return ", ".join(part for part in (_minute_phrase(minute), hour_text) if part), False


def _whole_hours(hour: _Shape) -> str:
    """Minute 0 of a set of hours: "Every hour", "Every 2 hours", "Every hour from 09:00 through 17:00"."""
    if hour[0] == "any":
        return "Every hour"
    if hour[0] == "range":
        return f"Every hour from {_clock(hour[1])} through {_clock(hour[2])}"
    _, step, first, last = hour
    if last is not None:
        return f"Every {step} hours from {_clock(first)} through {_clock(last)}"
    return f"Every {step} hours" + (f", starting at {_clock(first)}" if first else "")


def _minutes_past(values: str, count: int) -> str:
    return f"{values} minute{'s' if count != 1 else ''} past the hour"


def _minute_phrase(minute: _Shape) -> str:
    kind = minute[0]
    if kind == "any":
        return "Every minute"
    if kind == "one":
        return "At " + _minutes_past(str(minute[1]), minute[1])
    if kind == "range":
        return f"Every minute from {_minutes_past(f'{minute[1]} through {minute[2]}', 2)}"
    if kind == "step":
        _, step, first, last = minute
        if last is not None:
            return f"Every {step} minutes from {_minutes_past(f'{first} through {last}', 2)}"
        return f"Every {step} minutes" + (f", starting at {_minutes_past(str(first), first)}" if first else "")
    items = [f"{item[0]}-{item[1]}" if isinstance(item, tuple) else str(item) for item in minute[1]]
    return "At " + _minutes_past(_join(items), 2)


def _hour_clause(hour: _Shape) -> str:
    kind = hour[0]
    if kind == "any":
        return ""
    if kind == "one":
        return f"between {_clock(hour[1])} and {_clock(hour[1], 59)}"
    if kind == "range":
        return f"between {_clock(hour[1])} and {_clock(hour[2], 59)}"
    if kind == "step":
        _, step, first, last = hour
        if last is not None:
            return f"every {step} hours from {_clock(first)} through {_clock(last)}"
        return f"every {step} hours" + (f", starting at {_clock(first)}" if first else "")
    items = [f"{_clock(item[0])}-{_clock(item[1], 59)}" if isinstance(item, tuple)
             else f"{_clock(item)}-{_clock(item, 59)}" for item in hour[1]]
    return "during " + _join(items)


def _day_phrases(dom: _Shape, dow: _Shape, nth: dict[int, set[Any]], dom_text: str) -> list[str]:
    month_days = _month_day_phrase(dom, dom_text)
    weekdays = _weekday_phrase(dow, nth)
    if month_days and weekdays:  # cron's OR rule: either one matches
        return [f"{month_days} or {weekdays.removeprefix('only ')}"]
    return [text for text in (month_days, weekdays) if text]


def _day_name(item: Any) -> str:
    if item == "L":
        return "the last day"
    if isinstance(item, tuple):
        return f"{item[0]} through {item[1]}"
    return str(item)


def _month_day_phrase(dom: _Shape, dom_text: str) -> str:
    kind = dom[0]
    nearest = _NEAREST_WEEKDAY.match(dom_text)
    if nearest:
        return f"on the weekday nearest day {int(nearest.group(1))} of the month"
    if kind == "any":
        return ""
    if kind == "one":
        return f"on day {dom[1]} of the month"
    if kind == "range":
        return f"on days {dom[1]} through {dom[2]} of the month"
    if kind == "step":
        _, step, first, last = dom
        if last is not None:
            return f"every {step} days from day {first} through {last} of the month"
        return f"on every {_ordinal(step)} day of the month" + (f", starting on day {first}" if first != 1 else "")
    items = dom[1]
    if items == ["L"]:
        return "on the last day of the month"
    numbered = [item for item in items if item != "L"]
    prefix = "on day " if len(numbered) == 1 and not isinstance(numbered[0], tuple) else "on days "
    return prefix + _join([_day_name(item) for item in items]) + " of the month"


def _weekday_phrase(dow: _Shape, nth: dict[int, set[Any]]) -> str:
    if dow[0] == "any":
        return ""
    if nth:
        occurrences = [f"the {'last' if n == 'l' else _ORDINALS.get(n, _ordinal(n))} {_WEEKDAYS[day]}"
                       for day in sorted(nth) for n in sorted(nth[day], key=str)]
        return "on " + _join(occurrences) + " of the month"
    if dow[0] == "range":
        return f"{_WEEKDAYS[dow[1]]} through {_WEEKDAYS[dow[2]]}"
    days = sorted(_expand_items(dow, 6), key=lambda day: (day - 1) % 7)  # Monday first
    return "only on " + _join([_WEEKDAYS[day] for day in days])


def _month_phrase(month: _Shape) -> list[str]:
    kind = month[0]
    if kind == "any":
        return []
    if kind == "range":
        return [f"{_MONTHS[month[1] - 1]} through {_MONTHS[month[2] - 1]}"]
    months = _expand_items(month, 12)
    if kind == "step" and month[3] is None and month[2] == 1 and len(months) > _MAX_LISTED_MONTHS:
        return [f"every {month[1]} months"]
    return ["only in " + _join([_MONTHS[m - 1] for m in months])]


def _expand_items(shape: _Shape, high: int) -> list[int]:
    """Every value of a field, in order; [] for "any" (and for a list with the last day)."""
    if shape[0] == "any" or (shape[0] == "list" and "L" in shape[1]):
        return []
    if shape[0] == "one":
        return [shape[1]]
    if shape[0] == "range":
        return list(range(shape[1], shape[2] + 1))
    if shape[0] == "step":
        _, step, first, last = shape
        return list(range(first, (high if last is None else last) + 1, step))
    values: list[int] = []
    for item in shape[1]:
        values.extend(range(item[0], item[1] + 1) if isinstance(item, tuple) else [item])
    return values
