"""Task definitions refuse what the databases cannot store, naming the field (never a database error)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_core import TaskDefinition
from scheduler_core.errors import ConfigError
from scheduler_core.model import DECLARED, validate_task
from scheduler_core.task_schema import Widget


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


@pytest.mark.parametrize(("changes", "field"), [
    ({"catchup": {"policy": "some"}}, "catchup.policy"),
    ({"catchup": {"policy": "all", "window_ms": -1}}, "catchup.window_ms"),
    ({"catchup": {"policy": "latest", "window_ms": 7 * 86_400_000 + 1}}, "catchup.window_ms"),
    ({"catchup": {"policy": "all", "every": 1}}, "catchup.every"),
    ({"catchup": "all"}, "catchup"),
    ({"node_group": ""}, "node_group"),
    ({"node_group": "g" * 65}, "node_group"),
    ({"node_group": 5}, "node_group"),
    ({"node_group": "line\nbreak"}, "node_group"),
])
def test_catch_up_and_group_are_checked_by_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_task(TaskDefinition(**{"id": "t", "name": "T", "cron": "* * * * *", **changes}))
    assert info.value.field == field


def test_groups_are_kept_sorted_and_once() -> None:
    from scheduler_core import SchedulerConfig

    assert SchedulerConfig(groups=["reports", "billing", "reports"]).groups == ("billing", "reports")
    assert validate_task(TaskDefinition(id="t", name="T", cron="* * * * *",
                                        catchup={"policy": "all"})).catchup_policy.window_ms == 3_600_000


@pytest.mark.parametrize("link", ["javascript:alert(1)", "JaVaScRiPt:alert(1)", "data:text/html,x", "//evil.example",
                                  "https://", "ftp://files.example/x", "https://wiki.example/a b", "https://x\n.y",
                                  "https://" + "a" * 2048, "", 7, "http://[::1"])
def test_a_runbook_link_is_an_http_url_a_page_may_link_to(link: Any) -> None:
    with pytest.raises(ConfigError) as info:
        validate_task(TaskDefinition(id="t", name="T", cron="* * * * *", runbook_url=link))
    assert info.value.field == "runbook_url"


def test_a_runbook_link_is_kept_as_given() -> None:
    for link in ("https://wiki.example.com/runbooks/x?y=1#z", "HTTP://intranet:8080/r", None):
        assert validate_task(TaskDefinition(id="t", name="T", cron="* * * * *", runbook_url=link)).runbook_url == link


TYPED_TEXT = (Widget.ID, Widget.LINE, Widget.TEXT, Widget.GROUP)  # the cron and the zone have rules of their own


@pytest.mark.parametrize("name", [f.name for f in DECLARED if f.spec.widget in TYPED_TEXT])
def test_each_text_field_takes_its_declared_length_and_not_one_more(name: str) -> None:
    """The length the form's maxlength and the API's maxLength state (the declaration) is the one checked."""
    longest = next(f.spec.max_length for f in DECLARED if f.name == name)
    assert longest is not None, f"{name}: a text field declares its max_length"
    prefix = "https://example.com/" if name == "runbook_url" else ""
    base = {"id": "t", "name": "T", "cron": "* * * * *"}
    for length, refused in ((longest, False), (longest + 1, True)):
        task = TaskDefinition(**{**base, name: prefix + "x" * (length - len(prefix))})
        if refused:
            with pytest.raises(ConfigError) as info:
                validate_task(task)
            assert info.value.field == name and str(longest) in info.value.message, info.value
        else:
            validate_task(task)


@pytest.mark.parametrize("owner", ["team-billing\nbilling-oncall@example.com", "a\rb", "", "   ", "x" * 256,
                                   "ops\x00", "ops\ud800", 7, ["team-billing"]])
def test_an_owner_is_one_line_of_text(owner: Any) -> None:
    with pytest.raises(ConfigError) as info:
        validate_task(TaskDefinition(id="t", name="T", cron="* * * * *", owner=owner))
    assert info.value.field == "owner"


def test_an_owner_is_kept_as_given() -> None:
    for owner in ("team-billing (billing-oncall@example.com)", "Ünal Öz, ops \u202e", "x" * 255, None):
        assert validate_task(TaskDefinition(id="t", name="T", cron="* * * * *", owner=owner)).owner == owner
