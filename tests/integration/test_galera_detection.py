"""On a server that is not a Galera node nothing of Galera applies (scheduler_core/db/galera.py):
no Galera node is reported, no session setting is touched, and start-up checks nothing. The
cluster itself is in tests/galera."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig
from scheduler_core.db.galera import check_galera, galera_node


def test_a_server_that_is_not_a_galera_node_is_left_as_it_is(engine: Engine) -> None:
    assert galera_node(engine) is None and check_galera(engine) is None
    if engine.dialect.name in ("mysql", "mariadb"):
        with engine.connect() as conn:
            variables = dict(conn.execute(text("SHOW VARIABLES LIKE 'wsrep_sync_wait'")).all())
            assert variables.get("wsrep_sync_wait", "0") == "0", variables  # MariaDB has it, unset
    scheduler = Scheduler(engine, SchedulerConfig(node_id="plain"))
    scheduler.init()
    try:
        assert scheduler.context().skew is None
    finally:
        scheduler.close()
