"""Cron occurrence ids on every database: named by the UTC minute, never the task's wall minute.

Every node computes the id of a cron occurrence on its own; they agree because the id hashes the
task id and the UTC minute the schedule fires at. A task in a zone away from UTC is where a node
that hashed the wall-clock minute instead would still run every test of a UTC task unharmed.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.cron import cron_occurrence_id
from scheduler_core.db.tables import executions
from tests.helpers.journal import enter_minute

BERLIN = ZoneInfo("Europe/Berlin")


def _wall_minute_ms(utc_minute_ms: int) -> int:
    """The Berlin wall-clock reading of a UTC minute, as if it were a UTC instant."""
    offset = datetime.fromtimestamp(utc_minute_ms / 1000, UTC).astimezone(BERLIN).utcoffset()
    assert offset is not None
    return utc_minute_ms + int(offset.total_seconds() * 1000)


def test_a_berlin_task_names_its_occurrence_by_the_utc_minute(engine: Engine, make_node: Any) -> None:
    minute = enter_minute(engine)  # DB time is 5 s into this UTC minute
    wall = datetime.fromtimestamp(_wall_minute_ms(minute) / 1000, UTC)  # its Berlin wall time
    fired: list[Any] = []
    done = threading.Event()

    def execute(event: Any) -> str:
        fired.append(event.context)
        done.set()
        return "ok"

    node = make_node(hooks={"on_task_execute": execute})
    # Fires once a day, at exactly this minute's Berlin wall time.
    node.register(TaskDefinition(id="berlin", name="Berlin", cron=f"{wall.minute} {wall.hour} * * *",
                                 timezone="Europe/Berlin"))
    node.start()
    assert done.wait(15), "the Berlin task did not fire in its minute"
    time.sleep(0.3)  # ticks later in the minute do not fire it again
    (context,) = fired
    assert context.trigger == "cron" and context.scheduled_minute == minute
    expected = cron_occurrence_id("berlin", minute)
    assert context.occurrence_id == expected
    assert _wall_minute_ms(minute) != minute  # Berlin is never at UTC+0
    assert context.occurrence_id != cron_occurrence_id("berlin", _wall_minute_ms(minute))
    with engine.connect() as conn:
        journaled = conn.execute(select(executions.c.occurrence_id, executions.c.scheduled_minute)
                                 .where(executions.c.task_id == "berlin")).all()
    assert [(row.occurrence_id, int(row.scheduled_minute)) for row in journaled] == [(expected, minute)]
