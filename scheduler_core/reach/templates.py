"""Templates bound to a provider, with ``{var}`` substitution.

A variable the template names but the caller did not give is TEMPLATE_RENDER_FAILED, never
an empty string: a notification with a hole in it is worse than none. ``{{`` and ``}}``
write literal braces.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from scheduler_core.errors import ReachConfigError, TemplateRenderFailedError

_VARIABLE = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")


def variables(text: str) -> set[str]:
    return {m.group(1) for m in _VARIABLE.finditer(text) if m.group(1)}


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
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise ReachConfigError("vars", "must be a mapping of variable names to values")
    for key, value in values.items():
        if not isinstance(key, str) or not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ReachConfigError(f"vars.{key}", "values must be strings or numbers")
    return dict(values)
