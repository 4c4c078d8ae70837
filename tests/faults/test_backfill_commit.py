"""A backfill whose COMMIT reaches the server but whose answer is lost (docs/semantics.md S11), on
PostgreSQL and MariaDB through the fault suite's TCP proxy: the caller is told it failed (the
store never runs a COMMIT it cannot confirm again), the runs it queued are there once, and the
operator's second try finds them queued and queues nothing more -- it says ``already``, not
``new``."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.cron import MINUTE_MS
from scheduler_core.db import close_engine, create_engine
from scheduler_core.db.tables import audit_log
from scheduler_core.errors import SchedulerError
from tests.conftest import TestDatabase
from tests.helpers.fault_node import statement_kind
from tests.helpers.node_cluster import db_now, journal, register_tasks
from tests.helpers.tcp_proxy import Statements, TcpProxy

HOUR_MS = 60 * MINUTE_MS


def _queues_rows(statements: Statements) -> bool:
    return any(statement_kind(s) == "claim" for s in statements)  # INSERT INTO executions


def test_a_backfill_whose_commit_answer_is_lost_queues_each_minute_once(server_database: TestDatabase,
                                                                       server_engine: Engine) -> None:
    engine = server_engine
    register_tasks(engine, [TaskDefinition(id="rep", name="rep", cron="*/5 * * * *")])
    now = db_now(engine)
    start, end = now - now % HOUR_MS - 3 * HOUR_MS, now - now % HOUR_MS - HOUR_MS  # 25 fire times
    proxy = TcpProxy.for_url(server_database.url)
    proxied = create_engine({"url": proxy.url(server_database.url), "pool_size": 6})
    operator = Scheduler(proxied, SchedulerConfig(node_id="operator", max_concurrency=1), executors=[])
    try:
        operator.init()
        sprung = proxy.drop_reply_to_next_commit(_queues_rows)
        with pytest.raises(SchedulerError):
            operator.backfill("rep", start, end, by="alice", reason="the outage")
        assert sprung.is_set()
        rows = journal(engine, task_id="rep")
        assert len(rows) == 25 and {(r.status, r.trigger) for r in rows} == {("queued", "backfill")}

        again = operator.backfill("rep", start, end, by="alice", reason="the outage, again")
        assert (again.count, again.new, again.again, again.already, again.queued) == (25, 0, 0, 25, 0)
        assert len(journal(engine, task_id="rep")) == 25
    finally:
        operator.close()
        close_engine(proxied)
        proxy.close()
    with engine.connect() as conn:
        audited = conn.execute(select(audit_log.c.reason, audit_log.c.after).where(
            audit_log.c.action == "task.backfill")).all()
        conn.rollback()
    # the lost COMMIT's audit line is there with its rows; the second says it queued nothing
    assert sorted((reason, after["queued"]) for reason, after in audited) == [("the outage", 25),
                                                                              ("the outage, again", 0)]
