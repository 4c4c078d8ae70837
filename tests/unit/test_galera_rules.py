"""What Galera asks of the schema and of a node's settings (scheduler_core/db/galera.py); the
cluster itself is in tests/galera."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import Integer

from scheduler_core.db.galera import GaleraNode, clock_ahead
from scheduler_core.db.tables import metadata
from scheduler_core.errors import ClockSkewError
from scheduler_core.runtime.clock_skew import SkewWatch

GOOD = GaleraNode(node_name="g1", cluster_status="Primary", cluster_size=3, local_state="Synced", ready=True,
                  sync_wait=3, binlog_format="ROW", osu_method="TOI")


def test_every_table_has_a_primary_key_and_none_counts_up() -> None:
    """Galera replicates a row by its key; a table without one is not safe to write on two
    nodes. Auto-increment needs innodb_autoinc_lock_mode=2 on Galera: none is used."""
    for table in metadata.sorted_tables:
        assert list(table.primary_key.columns), f"{table.name} has no primary key"
        for column in table.primary_key.columns:
            assert not (isinstance(column.type, Integer) and column.autoincrement is True), (table.name, column.name)
            if isinstance(column.type, Integer) and len(table.primary_key.columns) == 1:
                assert column.autoincrement is False, f"{table.name}.{column.name} would count up"


@pytest.mark.parametrize(("change", "named"), [
    ({"binlog_format": "STATEMENT"}, "binlog_format is STATEMENT"),
    ({"binlog_format": "MIXED"}, "binlog_format is MIXED"),
    ({"osu_method": "RSU"}, "wsrep_OSU_method is RSU"),
    ({"sync_wait": 0}, "wsrep_sync_wait is 0"),
    ({"sync_wait": 1}, "wsrep_sync_wait is 1"),
])
def test_a_setting_against_a_rule_is_named(change: dict[str, object], named: str) -> None:
    assert GOOD.problem is None
    assert dataclasses.replace(GOOD, sync_wait=7).problem is None  # stronger is fine
    problem = dataclasses.replace(GOOD, **change).problem  # type: ignore[arg-type]
    assert problem is not None and problem.startswith(named), problem


def test_a_heartbeat_from_the_future_is_a_clock_ahead() -> None:
    assert clock_ahead(1_000, [("a", 900), ("b", 1_000)]) is None
    assert clock_ahead(1_000, [("a", 1_400), ("b", 3_000), ("c", 500)]) == ("b", 2_000)


def test_a_measured_difference_beyond_the_tolerance_refuses_either_way() -> None:
    watch = SkewWatch("me", tolerance_ms=2_000)
    watch.refuse({"a": (-200, 150), "b": (1_800, 2_100), "c": (-2_100, -1_900)})  # may be within: starts
    with pytest.raises(ClockSkewError, match=r"node a .* at least 2001 ms ahead of"):
        watch.refuse({"a": (2_001, 2_300)})
    with pytest.raises(ClockSkewError, match=r"node z .* at least 2001 ms behind"):
        watch.refuse({"z": (-2_400, -2_001)})
