"""The harness itself, proved on a real pg_auto_failover formation: the multi-host URL follows the
primary through a failover and a switchover, a synchronous standby loses no committed row, the
asynchronous mode is what it says, and a libfaketime offset reaches the standby's server.

psycopg is used directly: its conninfo takes libpq multi-host URLs (SQLAlchemy's URL parser does
not, yet). Run with ``python -m pytest -q -p no:randomly tests/ha -s`` to see the figures.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from tests.ha.cluster import Cluster

pytestmark = [pytest.mark.ha, pytest.mark.slow]


@pytest.fixture(scope="module")
def ha_url(ha_cluster: Cluster) -> Iterator[str]:
    """A database of this module's on the formation, with a table of rows."""
    url = ha_cluster.create_database(f"hai_ha_{uuid.uuid4().hex[:8]}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE rows (id bigserial PRIMARY KEY, label text NOT NULL)")
    yield url


def _dbname(url: str) -> str:
    return url.rsplit("/", 1)[1].split("?")[0]


def _server_port(url: str) -> tuple[int, bool]:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT inet_server_port(), pg_is_in_recovery()").fetchone()
    assert row is not None
    return int(row[0]), bool(row[1])


def _write(url: str, label: str, count: int = 1) -> list[int]:
    """Insert ``count`` rows, each in a transaction of its own; returns their ids (all committed)."""
    ids = []
    with psycopg.connect(url, connect_timeout=5) as conn:
        for i in range(count):
            row = conn.execute("INSERT INTO rows (label) VALUES (%s) RETURNING id", (f"{label}-{i}",)).fetchone()
            conn.commit()
            assert row is not None
            ids.append(int(row[0]))
    return ids


def _labels(conninfo: str | psycopg.Connection[Any], prefix: str) -> set[str]:
    if isinstance(conninfo, str):
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
            return _labels(conn, prefix)
    return {r[0] for r in conninfo.execute("SELECT label FROM rows WHERE label LIKE %s", (f"{prefix}-%",))}


def test_the_multi_host_url_lands_on_the_primary_whichever_host_comes_first(ha_cluster: Cluster, ha_url: str) -> None:
    primary, standby = ha_cluster.wait_sync_standby()
    assert ha_cluster.hosts == [("127.0.0.1", n.port) for n in ha_cluster.nodes]
    assert ha_url.startswith("postgresql://postgres@127.0.0.1:")
    assert f"127.0.0.1:{primary.port}" in ha_url and f"127.0.0.1:{standby.port}" in ha_url
    assert "target_session_attrs=read-write" in ha_url
    assert _server_port(ha_url) == (primary.port, False)
    standby_first = (f"postgresql://postgres@127.0.0.1:{standby.port},127.0.0.1:{primary.port}/{_dbname(ha_url)}"
                     "?target_session_attrs=read-write")
    assert _server_port(standby_first) == (primary.port, False)
    ha_cluster.wait_standby_replayed()  # the module's CREATE DATABASE is flushed there, maybe not applied yet
    assert _server_port(ha_cluster.url(_dbname(ha_url), target_session_attrs="standby")) == (
        standby.port, True)
    with ha_cluster.connect(primary) as conn:
        names = conn.execute("SELECT current_setting('synchronous_standby_names')").fetchone()
        states = conn.execute("SELECT sync_state FROM pg_stat_replication").fetchall()
    print(f"\n[ha] primary {primary.name}:{primary.port}, standby {standby.name}:{standby.port}; "
          f"synchronous_standby_names={names[0] if names else None!r}, sync_state={[s[0] for s in states]}")


def test_a_killed_primary_fails_over_and_no_committed_row_is_lost(ha_cluster: Cluster, ha_url: str) -> None:
    ha_cluster.wait_healthy()
    old = ha_cluster.primary()
    committed = _write(ha_url, "before-kill", 50)
    assert len(committed) == 50

    killed_at = ha_cluster.kill_primary(with_keeper=True)  # the node's pg_autoctl too: nothing restarts it
    recovery = ha_cluster.wait_failover(old)

    assert recovery.outcome == "failover" and recovery.new_primary != old.name
    assert recovery.killed_at == killed_at
    new = ha_cluster.primary()
    assert new.name == recovery.new_primary
    assert _server_port(ha_url) == (new.port, False), "a new connection with the same URL reaches the new primary"
    assert _labels(ha_url, "before-kill") == {f"before-kill-{i}" for i in range(50)}, "a committed row was lost"
    _write(ha_url, "after-failover", 5)
    assert len(_labels(ha_url, "after-failover")) == 5
    ha_cluster.wait_sync_standby()
    ha_cluster.wait_standby_replayed()
    with ha_cluster.connect(old, _dbname(ha_url)) as conn:  # the old primary, now a standby
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        assert len(_labels(conn, "before-kill")) == 50
    print(f"\n[ha] SIGKILL of {old.name} (postmaster + pg_autoctl) -> {recovery.new_primary} writable after "
          f"{recovery.writable_after_s:.1f} s; {old.name} a synchronous standby again after "
          f"{recovery.rejoined_after_s:.1f} s")


def test_a_killed_postmaster_alone_is_restarted_or_failed_over_and_loses_nothing(
        ha_cluster: Cluster, ha_url: str) -> None:
    ha_cluster.wait_healthy()
    old = ha_cluster.primary()
    _write(ha_url, "before-postmaster-kill", 20)

    ha_cluster.kill_primary()  # only the postmaster: pg_autoctl is alive and restarts it
    recovery = ha_cluster.wait_recovered()

    assert recovery.outcome in ("failover", "restart")
    assert _server_port(ha_url) == (ha_cluster.primary().port, False)
    assert len(_labels(ha_url, "before-postmaster-kill")) == 20
    _write(ha_url, "after-postmaster-kill", 3)
    print(f"\n[ha] SIGKILL of {old.name}'s postmaster alone: {recovery}")
    print("[ha] monitor events since the kill:\n    " + ("\n    ".join(recovery.events) or "(none)"))


def test_a_planned_switchover_moves_the_primary_and_the_url_follows(ha_cluster: Cluster, ha_url: str) -> None:
    ha_cluster.wait_healthy()
    old = ha_cluster.primary()
    _write(ha_url, "before-switchover", 10)

    switch = ha_cluster.switchover()

    assert switch.old_primary == old.name and switch.new_primary != old.name
    assert ha_cluster.primary().name == switch.new_primary and ha_cluster.standby().name == old.name
    assert _server_port(ha_url) == (ha_cluster.node(switch.new_primary).port, False)
    assert len(_labels(ha_url, "before-switchover")) == 10
    _write(ha_url, "after-switchover", 3)
    assert 0 <= switch.unwritable_s <= switch.writable_after_s <= switch.duration_s
    print(f"\n[ha] switchover {old.name} -> {switch.new_primary}: no writable primary for {switch.unwritable_s:.1f} s; "
          f"{switch.new_primary} writable {switch.writable_after_s:.1f} s after the command, synchronous standby "
          f"again after {switch.duration_s:.1f} s")


def test_the_asynchronous_mode_leaves_the_standby_out_of_the_commit(ha_cluster: Cluster, ha_url: str) -> None:
    ha_cluster.wait_healthy()
    try:
        ha_cluster.set_synchronous(False)
        primary, _ = ha_cluster.wait_async_standby()
        with ha_cluster.connect(primary) as conn:
            assert conn.execute("SELECT current_setting('synchronous_standby_names')").fetchone() == ("",)
            assert conn.execute("SELECT sync_state FROM pg_stat_replication").fetchall() == [("async",)]
        assert {r["nodename"]: r["quorum"] for r in ha_cluster.state()} == {"node1": False, "node2": False}
        _write(ha_url, "async", 3)
    finally:
        ha_cluster.set_synchronous(True)
    primary, _ = ha_cluster.wait_sync_standby()
    with ha_cluster.connect(primary) as conn:
        assert conn.execute("SELECT sync_state FROM pg_stat_replication").fetchall() in ([("quorum",)], [("sync",)])


def test_a_faketime_offset_reaches_the_standby_server(ha_cluster_factory: Callable[..., Cluster]) -> None:
    cluster = ha_cluster_factory(standby_faketime="+5s")
    primary, standby = cluster.wait_sync_standby()
    assert standby.name == "node2" and standby.faketime == "+5s"

    offsets = cluster.clock_offsets()  # SELECT now() on each node against this process's clock

    assert abs(offsets["node2"] - 5.0) < 1.0, offsets
    assert abs(offsets["node1"]) < 1.0, offsets
    with cluster.connect(standby) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
    print(f"\n[ha] libfaketime FAKETIME=+5s on {standby.name}'s pg_autoctl run: now() on {primary.name} "
          f"{offsets[primary.name]:+.2f} s, on {standby.name} (standby) {offsets[standby.name]:+.2f} s "
          f"from this process's clock; start-up {cluster.timings['start_s']:.1f} s")
