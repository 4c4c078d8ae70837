"""A task's overlap policy checks itself (docs/semantics.md S9): a bad value is refused naming its
field, and terminate_other only for handlers whose process the node kills."""

from __future__ import annotations

import pytest

from scheduler_core import TaskDefinition
from scheduler_core.errors import ConfigError
from scheduler_core.model import validate_task
from scheduler_core.task_policies import OverlapMode, OverlapPolicy


@pytest.mark.parametrize(("value", "field"), [
    ({"policy": "queue"}, "overlap.policy"),
    ({"policy": "buffer_all", "buffer_limit": 0}, "overlap.buffer_limit"),
    ({"policy": "buffer_all", "buffer_limit": 1001}, "overlap.buffer_limit"),
    ({"policy": "buffer_all", "buffer_limit": True}, "overlap.buffer_limit"),
    ({"policy": "skip", "limit": 3}, "overlap.limit"),
])
def test_a_bad_value_is_refused_naming_its_field(value: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as refused:
        validate_task(TaskDefinition(id="t", name="t", cron="* * * * *", overlap=value))
    assert refused.value.field == field


def test_how_many_may_wait() -> None:
    assert OverlapPolicy().waiting_limit == 0
    assert OverlapPolicy(OverlapMode.BUFFER_ONE, 50).waiting_limit == 1
    assert OverlapPolicy(OverlapMode.BUFFER_ALL, 50).waiting_limit == 50
    assert OverlapPolicy(OverlapMode.CANCEL_OTHER).waiting_limit == 1
    assert [m for m in OverlapMode if OverlapPolicy(m).supersedes] == ["cancel_other", "terminate_other"]


@pytest.mark.parametrize(("handler", "allowed"), [
    (None, False),  # the host's hook: it can only be asked
    ({"kind": "api", "url": "http://127.0.0.1:9/x"}, False),
    ({"kind": "python", "code": "def run(ctx):\n    return 1\n"}, True),
    ({"kind": "command", "argv": ["/bin/true"]}, True),
])
def test_terminate_other_only_where_the_node_kills_the_process(handler: dict[str, object] | None,
                                                               allowed: bool) -> None:
    task = TaskDefinition(id="t", name="t", cron="* * * * *", handler=handler, overlap={"policy": "terminate_other"})
    if allowed:
        assert validate_task(task).overlap_policy.policy == "terminate_other"
    else:
        with pytest.raises(ConfigError) as refused:
            validate_task(task)
        assert refused.value.field == "overlap.policy" and "cancel_other" in refused.value.message
    cancel = TaskDefinition(id="t", name="t", cron="* * * * *", handler=handler, overlap={"policy": "cancel_other"})
    assert validate_task(cancel).overlap_policy.supersedes
