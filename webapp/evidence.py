"""The evidence an operator decides on, as the pages show it: an execution's last error, its
duration, the HTTP status or exit code its error names, and bounded, masked excerpts of an
attempt's log. Pure functions over the journal's values, registered as template globals.

Executors write the status into the error text (``HTTP 500 Internal Server Error``, ``the
process exited with code 3``, ``killed by SIGKILL``; scheduler_core/executors/http.py and
code.py); these are read back from there, so the journal needs no extra column.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from flask import Flask

from scheduler_core.masking import mask_text, mask_values
from scheduler_core.model import Attempt, Execution

EXCERPT_CHARS = 2_000  # an attempt's log on a card: the rest is one click away (the log page)
LINE_CHARS = 160  # an error in a table cell
_HTTP = re.compile(r"\bHTTP (\d{3})\b")
_EXIT = re.compile(r"exited with code (-?\d+)")
_SIGNAL = re.compile(r"killed by (SIG[A-Z0-9]+|signal \d+)")


@dataclass(frozen=True)
class Excerpt:
    text: str  # masked, at most EXCERPT_CHARS characters
    cut: int  # characters left out (0: the whole text)


def last_attempt(execution: Execution) -> Attempt | None:
    return execution.attempts[-1] if execution.attempts else None


def attempt_duration(attempt: Attempt | None) -> int | None:
    if attempt is None or attempt.finished_at is None:
        return None
    return max(attempt.finished_at - attempt.started_at, 0)


def execution_duration(execution: Execution) -> int | None:
    """From the first attempt's start to the last one's end (retries and their waits included)."""
    if not execution.attempts or execution.attempts[-1].finished_at is None:
        return None
    return max((execution.attempts[-1].finished_at or 0) - execution.attempts[0].started_at, 0)


def last_error(execution: Execution) -> str | None:
    """The error of the newest attempt that has one, masked."""
    for attempt in reversed(execution.attempts):
        if attempt.error:
            return mask_text(attempt.error)
    return None


def first_line(text: str | None, limit: int = LINE_CHARS) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def exit_evidence(error: str | None) -> str | None:
    """``HTTP 500``, ``exit code 3`` or ``killed by SIGKILL`` when the error names one."""
    if not error:
        return None
    for pattern, label in ((_HTTP, "HTTP {}"), (_EXIT, "exit code {}"), (_SIGNAL, "killed by {}")):
        found = pattern.search(error)
        if found:
            return label.format(found.group(1))
    return None


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> Excerpt | None:
    """Text (or a JSON value, indented) masked and cut to ``limit`` characters; None when empty."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        text = mask_text(value) or ""
    else:
        text = json.dumps(mask_values(value), indent=2, sort_keys=True, default=str, ensure_ascii=False)
    return Excerpt(text[:limit], max(len(text) - limit, 0))


def install(app: Flask) -> None:
    app.add_template_global(last_attempt)
    app.add_template_global(attempt_duration)
    app.add_template_global(execution_duration)
    app.add_template_global(last_error)
    app.add_template_global(exit_evidence)
    app.add_template_global(excerpt)
    app.add_template_filter(first_line, "first_line")
