"""Lifecycle hooks around every attempt: context, order, signal, set/clear at runtime."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition


def test_events_carry_the_context_in_order(make_node: Any, engine: Engine) -> None:
    events: list[tuple[str, Any]] = []

    def recorder(name: str) -> Any:
        def hook(event: Any) -> Any:
            events.append((name, event))
            if name == "on_task_execute":
                if event.context.attempt == 1:
                    raise RuntimeError("first attempt fails")
                return {"attempt": event.context.attempt}
            return None

        return hook

    hooks = {name: recorder(name) for name in ("on_task_start", "on_task_execute", "on_task_finish",
                                               "on_task_error")}
    node = make_node(hooks=hooks)
    node.register(TaskDefinition(id="job", name="Job", cron="0 2 * * *", idempotent=True,
                                 retry={"max_attempts": 2}, params={"channel": "ops"}))
    log = node.trigger("job", source="cli")
    assert log.status == "success"
    assert [name for name, _ in events] == ["on_task_start", "on_task_execute", "on_task_error",
                                            "on_task_start", "on_task_execute", "on_task_finish"]
    error_event, finish_event = events[2][1], events[5][1]
    assert (error_event.status, error_event.error) == ("failed", "RuntimeError: first attempt fails")
    assert (finish_event.status, finish_event.result) == ("success", {"attempt": 2})
    contexts = {(e.context.occurrence_id, e.context.execution_token, e.context.sequence) for _, e in events}
    assert len(contexts) == 1  # one occurrence, one ownership across the retry
    context = finish_event.context
    assert (context.task_id, context.attempt, context.trigger, context.source, dict(context.params)) == (
        "job", 2, "manual", "cli", {"channel": "ops"})
    assert context.occurrence_id == log.occurrence_id and finish_event.task.id == "job"
    assert not finish_event.signal.is_set()


def test_set_and_clear_hooks_at_runtime(make_node: Any) -> None:
    node = make_node()
    node.register(TaskDefinition(id="job", name="Job", cron="0 2 * * *"))
    assert node.trigger("job").status == "missed"  # no handler yet: no node can run it
    node.set_hooks({"on_task_execute": lambda e: "now handled"})
    assert node.trigger("job").result == "now handled"
    node.clear_hooks()
    assert node.trigger("job").status == "missed"
