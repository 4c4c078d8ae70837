"""Every handler kind end to end through the engine: registration checks, runs, outcomes, logs."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.errors import ConfigError, JsCompileFailedError
from tests.helpers.journal import enter_minute

PY_CODE = "def run(context):\n    return {'task': context['task_id'], 'n': context['params']['n'] * 2}\n"
JS_CODE = "async function run(context) { return {task: context.task_id, n: context.params.n * 2}; }"


def test_python_task_runs_in_a_worker_process(make_node: Any) -> None:
    node = make_node()
    node.register(TaskDefinition(id="py", name="Py", cron="0 2 * * *", params={"n": 21},
                                 handler={"kind": "python", "code": PY_CODE, "timeout": 10_000}))
    log = node.trigger("py")
    assert (log.status, log.result, log.persistence.status) == ("success", {"task": "py", "n": 42}, "persisted")
    assert node.get_logs(task_id="py")[0].result == {"task": "py", "n": 42}


def test_code_is_checked_at_registration_and_nothing_is_stored(make_node: Any, engine: Engine) -> None:
    node = make_node()
    with pytest.raises(JsCompileFailedError) as info:
        node.register(TaskDefinition(id="bad", name="Bad", cron="0 2 * * *",
                                     handler={"kind": "python", "code": "def run(context):\n    return (\n"}))
    assert info.value.code == "hai:scheduler:030"
    with pytest.raises(ConfigError) as config_info:
        node.register(TaskDefinition(id="bad", name="Bad", cron="0 2 * * *",
                                     handler={"kind": "python", "code": "x = 1"}))
    assert config_info.value.field == "handler.code"
    assert node.tasks == ()


def test_timed_out_worker_is_unknown_and_keeps_the_slot(make_node: Any) -> None:
    node = make_node()
    forever = "def run(context):\n    while True:\n        pass\n"
    node.register(TaskDefinition(id="loop", name="Loop", cron="0 2 * * *",
                                 handler={"kind": "python", "code": forever, "timeout": 1000}))
    log = node.trigger("loop")
    assert log.status == "unknown" and "timeout" in (log.error or "")
    assert node.trigger("loop").status == "skipped"  # the unknown execution keeps the slot
    assert [e.occurrence_id for e in node.execution.list_unknown()] == [log.occurrence_id]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_javascript_task_runs_in_node(make_node: Any) -> None:
    node = make_node()
    node.register(TaskDefinition(id="js", name="Js", cron="0 2 * * *", params={"n": 4},
                                 handler={"kind": "js", "code": JS_CODE}))
    log = node.trigger("js")
    assert (log.status, log.result) == ("success", {"task": "js", "n": 8})
    with pytest.raises(JsCompileFailedError):
        node.register(TaskDefinition(id="broken", name="B", cron="0 2 * * *",
                                     handler={"kind": "js", "code": "function run( {"}))


def test_close_kills_a_running_worker(make_node: Any, tmp_path: Any) -> None:
    import os
    import threading
    import time

    pid_file = tmp_path / "pid"
    code = ("import os, time\n"
            "def run(context):\n"
            f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
            "    time.sleep(60)\n")
    node = make_node()
    node.register(TaskDefinition(id="sleeper", name="Sleeper", cron="0 2 * * *",
                                 handler={"kind": "python", "code": code, "timeout": 60_000}))
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(node.trigger("sleeper")))
    worker.start()
    deadline = time.monotonic() + 15
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    started = time.monotonic()
    node.close()
    worker.join(15)
    assert time.monotonic() - started < 5
    assert result[0].status == "unknown"  # the code had started: its effect may exist
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


@pytest.fixture
def http_server() -> Any:
    from tests.helpers.http_server import RecordingServer

    server = RecordingServer()
    yield server
    server.close()


def test_api_task_fires_from_cron_and_logs_the_outcome(make_node: Any, http_server: Any, engine: Engine) -> None:
    import time

    node = make_node()
    node.register(TaskDefinition(id="billing/run", name="Billing", cron="* * * * *",
                                 handler={"kind": "api", "method": "POST", "url": http_server.url("/echo"),
                                          "body": {"amount": 3}, "headers": {"Authorization": "Bearer s3cret",
                                                                             "idempotency-key": "user-set"}}))
    assert "s3cret" not in repr(node.tasks[0])
    enter_minute(engine)  # 5 s into a DB minute: exactly one occurrence is due
    node.start()  # the current minute counts once: the cron occurrence fires now
    deadline = time.monotonic() + 15
    while not node.get_logs(task_id="billing/run"):
        assert time.monotonic() < deadline, "the api task did not fire"
        time.sleep(0.1)
    log = node.get_logs(task_id="billing/run")[0]
    assert (log.trigger, log.status, log.result) == ("cron", "success", {"amount": 3})
    seen = http_server.requests[-1]
    assert seen.header("Idempotency-Key") == log.occurrence_id and seen.count("Idempotency-Key") == 1
    assert seen.header("X-Scheduler-Task") == "billing%2Frun" and seen.header("Authorization") == "Bearer s3cret"


@pytest.mark.parametrize(("idempotent", "status"), [(False, "unknown"), (True, "failed")])
def test_api_error_status_is_unknown_unless_idempotent(make_node: Any, http_server: Any, idempotent: bool,
                                                       status: str) -> None:
    node = make_node()
    node.register(TaskDefinition(id="api", name="Api", cron="0 2 * * *", idempotent=idempotent,
                                 retry={"max_attempts": 2} if idempotent else None,
                                 handler={"kind": "api", "url": http_server.url("/status/503")}))
    log = node.trigger("api")
    assert (log.status, log.attempt) == (status, 2 if idempotent else 1)
    assert "503" in (log.error or "")
    assert len(http_server.requests) == (2 if idempotent else 1)
