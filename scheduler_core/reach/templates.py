"""Templates bound to a provider, with ``{var}`` substitution.

A variable the template names but the caller did not give is TEMPLATE_RENDER_FAILED, never
an empty string: a notification with a hole in it is worse than none. ``{{`` and ``}}``
write literal braces.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from scheduler_core.errors import ReachConfigError, TemplateRenderFailedError
from scheduler_core.validation import ID_MAX, check_json, check_text

_VARIABLE = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_VALUES = 100
MAX_VALUE_CHARS = 10_000


def variables(text: str | None) -> set[str]:
    """Every ``{name}`` the text substitutes (``{{name}}`` is a literal, not a variable)."""
    return {m.group(1) for m in _VARIABLE.finditer(text or "") if m.group(1)}


def missing_variables(values: Mapping[str, Any], *texts: str | None) -> list[str]:
    """The variables the texts use that ``values`` lacks, sorted: all of them at once, so a
    preview can name every hole instead of stopping at the first."""
    used: set[str] = set()
    for text in texts:
        used |= variables(text)
    return sorted(used - set(values))


def parse_values(text: str) -> dict[str, Any]:
    """Variables typed into a form: a JSON object, or one ``name=value`` per line (blank lines
    ignored, the value is everything after the first ``=``, trimmed). ReachConfigError("vars", ...)
    names the line that is wrong; a name given twice is refused rather than silently overridden."""
    if not isinstance(text, str):
        raise ReachConfigError("vars", "must be text")
    if text.lstrip().startswith("{"):
        try:
            loaded = json.loads(text)
        except ValueError as exc:
            raise ReachConfigError("vars", f"is not a valid JSON object: {exc}") from None
        values = loaded
    else:
        values = _parse_lines(text)
    return check_vars(values)


def _parse_lines(text: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, equals, value = line.partition("=")
        name = name.strip()
        if not equals or not _NAME.fullmatch(name):
            raise ReachConfigError("vars", f"line {number}: expected name=value with a name of letters, digits "
                                           "and underscores")
        if name in values:
            raise ReachConfigError("vars", f"line {number}: {name} is given twice")
        values[name] = value.strip()
    return values


def render(text: str, values: Mapping[str, Any], where: str) -> str:
    missing = sorted(variables(text) - set(values))
    if missing:
        raise TemplateRenderFailedError(f"{where}: missing variable(s) {', '.join(missing)}", missing=missing)

    def substitute(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        return str(values[match.group(1)])

    return _VARIABLE.sub(substitute, text)


def check_vars(values: Any) -> dict[str, Any]:
    """Template variables: names to strings or finite numbers (what a message can show)."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise ReachConfigError("vars", "must be a mapping of variable names to values")
    if len(values) > MAX_VALUES:
        raise ReachConfigError("vars", f"at most {MAX_VALUES} variables")
    for key, value in values.items():
        if not isinstance(key, str):
            raise ReachConfigError("vars", f"variable names must be strings (got {type(key).__name__})")
        check_text(key, "vars", ID_MAX, ReachConfigError)
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ReachConfigError(f"vars.{key}", "values must be strings or numbers")
        check_json(value, f"vars.{key}", ReachConfigError)  # NaN, infinity, NUL, surrogates, huge ints
        if isinstance(value, str):
            check_text(value, f"vars.{key}", MAX_VALUE_CHARS, ReachConfigError, blank=True)
    return dict(values)
