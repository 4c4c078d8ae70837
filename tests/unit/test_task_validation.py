"""Task definitions refuse what the databases cannot store, naming the field (never a database error)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_core import TaskDefinition
from scheduler_core.errors import ConfigError
from scheduler_core.model import validate_task


@pytest.mark.parametrize(("changes", "field"), [
    ({"id": "a\x00b"}, "id"),
    ({"name": "Nightly\x00"}, "name"),
    ({"description": "x\x00"}, "description"),
    ({"params": {"channel": "ops\x00"}}, "params.channel"),
    ({"params": {"bad\x00key": 1}}, "params"),
    ({"handler": {"kind": "hook", "note": ["a", "\x00"]}}, "handler.note[1]"),
])
def test_nul_characters_are_refused_by_field(changes: dict[str, Any], field: str) -> None:
    task = TaskDefinition(**{"id": "t", "name": "T", "cron": "* * * * *", **changes})
    with pytest.raises(ConfigError) as info:
        validate_task(task)
    assert info.value.field == field and "NUL" in info.value.message
