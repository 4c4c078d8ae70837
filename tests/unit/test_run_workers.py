"""The node's run threads (``runtime/run_pool.Workers``) and its random ids (``cron.random_id``)."""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any

import pytest

from scheduler_core.cron import random_id
from scheduler_core.runtime.run_pool import Workers


def test_workers_run_every_item_in_order_and_survive_a_failing_one(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[Any] = []

    def run(item: Any) -> None:
        if item == "bad":
            raise RuntimeError("broken around a runner")
        ran.append(item)

    workers = Workers(1, "test-run", run)
    for item in ("a", "bad", "b", "c"):
        workers.submit(item)
    workers.shutdown()  # runs what was submitted first
    assert ran == ["a", "b", "c"]
    assert "a run failed outside its runner" in caplog.text
    with pytest.raises(RuntimeError, match="shut down"):
        workers.submit("late")


def test_workers_run_at_most_their_count_at_once() -> None:
    count, gate, lock = 3, threading.Event(), threading.Lock()
    running, most = [0], [0]

    def run(item: Any) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        gate.wait(0.05)
        with lock:
            running[0] -= 1

    workers = Workers(count, "test-run", run)
    for item in range(12):
        workers.submit(item)
    workers.shutdown()
    assert most[0] == count


def test_random_ids_are_uuid4_and_distinct() -> None:
    ids = [random_id() for _ in range(2_000)]  # several draws of the buffer
    assert len(set(ids)) == len(ids)
    for text in ids[:300]:
        parsed = uuid.UUID(text)
        assert parsed.version == 4 and str(parsed) == text


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_process_never_repeats_its_parents_random_ids() -> None:
    random_id()  # the parent's buffer holds ids not yet handed out
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, then exit at once
        try:
            os.write(write_end, random_id().encode())
        finally:
            os._exit(0)
    os.close(write_end)
    child = os.read(read_end, 100).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    parent = [random_id() for _ in range(300)]
    assert child not in parent
