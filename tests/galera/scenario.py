"""The failover scenario of tests/ha/scenario.py on a Galera cluster, and the faults done to it.

:class:`GaleraTopology` gives ``FailoverRun`` what it needs of a topology, with one difference
from PostgreSQL: each scheduler node connects to its own Galera node (node i to Galera node i),
every one of them a primary. The disturbances:

- :func:`kill_galera_node`: SIGKILL of one Galera node's server (a machine gone); its scheduler
  node finds the database unreachable; after ``down_s`` the server starts again and rejoins by
  state transfer (which one, IST or SST, is read from its log).
- :func:`partition_galera_node`: the node is cut off from the group (``gmcast.isolate``) for
  ``seconds``: it loses quorum and refuses queries (1047) while the two others go on; then it
  rejoins.
- :func:`kill_scheduler_node`: SIGKILL of a scheduler node process; it is started again after
  ``down_s`` under the same node id.

No pytest in here.
"""

from __future__ import annotations

import re
import time
from typing import Any

from tests.galera.cluster import GaleraCluster
from tests.ha.scenario import Disturbance, FailoverRun


class GaleraTopology:
    """A :class:`GaleraCluster` as ``FailoverRun``'s topology (scheduler node i -> Galera node i)."""

    def __init__(self, cluster: GaleraCluster) -> None:
        self.cluster = cluster

    def wait_healthy(self, timeout: float = 120) -> None:
        for index in range(self.cluster.size):
            self.cluster.wait_synced(index, timeout)
        self.cluster.wait_size(self.cluster.size, timeout)

    def create_database(self, name: str) -> str:
        with self.cluster.connect(0) as conn, conn.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name}")
        return self.cluster.url(0, name)

    def node_url(self, url: str, index: int) -> str:
        return self.cluster.url(index % self.cluster.size, url.rsplit("/", 1)[1])

    def describe(self) -> str:
        parts = []
        for index, node in enumerate(self.cluster.nodes):
            try:
                status = self.cluster.status(index)
                parts.append(f"{node.name}: {status.get('wsrep_cluster_status')} size "
                             f"{status.get('wsrep_cluster_size')} {status.get('wsrep_local_state_comment')}")
            except Exception as exc:
                parts.append(f"{node.name}: unreachable ({type(exc).__name__})")
        return "; ".join(parts)

    def aborts(self) -> dict[str, dict[str, int]]:
        """Per Galera node: local commits, certification failures and brute-force aborts."""
        found = {}
        for index, node in enumerate(self.cluster.nodes):
            status = self.cluster.status(index)
            found[node.name] = {key: int(status.get(f"wsrep_{key}", 0) or 0)
                                for key in ("local_commits", "local_cert_failures", "local_bf_aborts")}
        return found


def _transfer(log_text: str) -> str:
    """Which state transfer a rejoin used, from the joiner's log since it started again."""
    if re.search(r"IST received|Receiving IST", log_text):
        return "IST"
    if re.search(r"SST (received|succeeded)|wsrep_sst_rsync --role 'joiner'", log_text):
        return "SST"
    return "state transfer not found in the log"


def kill_galera_node(topology: GaleraTopology, index: int, down_s: float) -> Disturbance:
    cluster = topology.cluster
    node = cluster.nodes[index]
    log_before = node.log.stat().st_size if node.log.exists() else 0
    at = time.time()
    cluster.kill(index)
    cluster.wait_size(cluster.size - 1, 60)
    time.sleep(max(0.0, down_s - (time.time() - at)))
    cluster.restart(index)
    cluster.wait_size(cluster.size, 60, via=index)
    with node.log.open("rb") as log:
        log.seek(log_before)
        transfer = _transfer(log.read().decode("utf-8", "replace"))
    back = time.time() - at
    return Disturbance("kill-galera", 0, at, 0, writable_after_s=0.0, rejoined_after_s=back, old_primary=node.name,
                       new_primary="(the others went on)", unwritable_s=0.0,
                       detail=f"{node.name} SIGKILLed, started again after {down_s:.0f} s, synced {back:.1f} s after "
                              f"the kill by {transfer}")


def partition_galera_node(topology: GaleraTopology, index: int, seconds: float) -> Disturbance:
    cluster = topology.cluster
    node = cluster.nodes[index]
    at = time.time()
    cluster.isolate(index)
    cluster.wait_size(cluster.size - 1, 60, via=(index + 1) % cluster.size)
    status = cluster.status(index)
    time.sleep(max(0.0, seconds - (time.time() - at)))
    cluster.reconnect(index)
    back = time.time() - at
    return Disturbance("partition", 0, at, 0, writable_after_s=0.0, rejoined_after_s=back, old_primary=node.name,
                       new_primary="(the others went on)", unwritable_s=0.0,
                       detail=f"{node.name} cut off for {seconds:.0f} s (its view: "
                              f"{status.get('wsrep_cluster_status')}, ready {status.get('wsrep_ready')}), "
                              f"synced again {back:.1f} s after the cut")


def kill_scheduler_node(run: FailoverRun, node_id: str, down_s: float) -> Disturbance:
    at = run.kill_node(node_id)
    time.sleep(down_s)
    run.respawn(node_id)
    return Disturbance("kill-node", 0, at, 0, writable_after_s=0.0, rejoined_after_s=time.time() - at,
                       old_primary=node_id, new_primary="(the other nodes)", unwritable_s=0.0,
                       detail=f"scheduler node {node_id} SIGKILLed, started again after {down_s:.0f} s")


def handler_starts_by(run: FailoverRun, node_id: str, start: float, end: float) -> list[dict[str, Any]]:
    """The hook handlers ``node_id`` started between two wall-clock moments."""
    from tests.helpers.oracle import read_events

    return [e for e in read_events(run.events)
            if e.get("kind") == "effect" and e.get("node") == node_id and start <= float(e["at"]) <= end]
