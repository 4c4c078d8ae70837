"""The Galera harness itself (issue #33): three real nodes from Debian's packages, writes on one
seen on another with causal reads, a node SIGKILLed and rejoining by state transfer."""

from __future__ import annotations

import pytest

from tests.galera.cluster import GaleraCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_three_nodes_replicate_and_a_killed_node_rejoins(galera: GaleraCluster) -> None:
    assert [galera.status(i)["wsrep_cluster_size"] for i in range(3)] == ["3", "3", "3"]
    with galera.connect(0, "test") as conn, conn.cursor() as cursor:
        cursor.execute("CREATE TABLE probe (id INT PRIMARY KEY)")
        cursor.execute("INSERT INTO probe VALUES (1)")
    with galera.connect(2, "test") as conn, conn.cursor() as cursor:
        cursor.execute("SET SESSION wsrep_sync_wait = 1")  # a causal read: waits for what was committed
        cursor.execute("SELECT COUNT(*) FROM probe")
        assert cursor.fetchone() == (1,)
    galera.kill(1)
    galera.wait_size(2)
    with galera.connect(0, "test") as conn, conn.cursor() as cursor:
        cursor.execute("INSERT INTO probe VALUES (2)")  # while it is away
    galera.restart(1)
    galera.wait_size(3)
    with galera.connect(1, "test") as conn, conn.cursor() as cursor:
        cursor.execute("SET SESSION wsrep_sync_wait = 1")
        cursor.execute("SELECT COUNT(*) FROM probe")
        assert cursor.fetchone() == (2,)
