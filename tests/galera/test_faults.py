"""Faults on the Galera cluster while the scheduler runs (issue #33, parts 1 and 3), judged by the
fault suite's oracle as the PostgreSQL failovers are (tests/ha/scenario.py).

Three scheduler nodes, node i writing through Galera node i, run the HA task mix (idempotent and
not, hooks and HTTP calls, handlers of 3-18 s) for five DB-clock minutes with an 8 s lease. While
handlers run, one after the other:

==========================  ==================================================================
fault                       what must follow
==========================  ==================================================================
SIGKILL of Galera node 2    node 2's scheduler finds its database gone and says so once; its
(12 s down, then restart)   leases run out and the others take its work over (idempotent) or
                            mark it unknown (not idempotent); the server rejoins by state
                            transfer and the scheduler node goes on
partition of Galera node 3  the node loses quorum and refuses queries (1047): its scheduler
(15 s cut off)              node starts no handler while cut off, says so once, and claims
                            again once the node has rejoined
SIGKILL of scheduler node   the others take its leases over, across Galera nodes; it is started
1 (10 s down)               again under the same id
==========================  ==================================================================

Judged over the whole window: 0 duplicate runs of a non-idempotent task, every due occurrence
journaled and settled (an operator resolves each unknown after checking the receiver), no
traceback in any node's log, and each scheduler node ran work again after its own fault. The
figures, the certification aborts and the state transfer used are printed (``-s``); evidence is
kept under test-output/galera/faults.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from tests.galera.cluster import GaleraCluster
from tests.galera.scenario import (
    GaleraTopology,
    handler_starts_by,
    kill_galera_node,
    kill_scheduler_node,
    partition_galera_node,
)
from tests.ha.scenario import MINUTE_MS, FailoverRun, save_evidence

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
OUTPUT = Path(os.environ.get("HAI_TEST_OUTPUT") or Path(__file__).resolve().parents[2] / "test-output") / "galera"


def test_galera_node_killed_partitioned_and_a_scheduler_node_killed_run_nothing_twice_and_lose_nothing(
        galera: GaleraCluster) -> None:
    topology = GaleraTopology(galera)
    run = FailoverRun(topology, "faults", OUTPUT / "faults", lease_ms=8_000, minutes=5,
                      lead_s=20.0)  # a start on Galera first watches the others' heartbeats (up to 7.5 s)
    try:
        run.start()
        killed = run.disturb("kill-galera", lambda: kill_galera_node(topology, 1, down_s=12), handlers=8)
        cut = run.disturb("partition", lambda: partition_galera_node(topology, 2, seconds=15), handlers=4)
        node = run.disturb("kill-node", lambda: kill_scheduler_node(run, "ha-node-1", down_s=10), handlers=4)
        run.finish()
        report = run.judge()
        aborts = topology.aborts()
        save_evidence(run, report, run.workdir)
    finally:
        run.close()
    print("\n" + report.summary() + f"\n[galera]   evidence: {run.workdir}", flush=True)
    for disturbance in (killed, cut, node):
        print(f"[galera]   {disturbance.what}: {disturbance.detail}")
    print(f"[galera]   commits, certification failures and brute-force aborts per Galera node: {aborts}")
    owners = {(r["scheduled_minute"] - run.minutes[0]) // MINUTE_MS: Counter() for r in report.executions}
    for r in report.executions:
        if r["attempts"]:
            owners[(r["scheduled_minute"] - run.minutes[0]) // MINUTE_MS][r["owner_node"]] += 1
    print(f"[galera]   executions by owner, per minute of the run: {({m: dict(c) for m, c in owners.items()})}")

    figures = report.figures
    assert figures["duplicates"] == 0, "a non-idempotent task ran twice:\n" + "\n".join(report.problems)
    assert figures["unaccounted"] == 0, "occurrences unaccounted for:\n" + "\n".join(report.problems)
    assert figures["rows"] == figures["due"], figures
    assert not report.problems, "\n".join(report.problems)
    assert "state transfer not found" not in killed.detail, killed.detail
    # Cut off, Galera node 3's scheduler node started nothing (a second after the cut, to the rejoin) ...
    assert not handler_starts_by(run, "ha-node-3", cut.at + 1, cut.at + (cut.rejoined_after_s or 0) - 1)
    # ... and each node with a gone or cut-off database said so once and again once it was back.
    for node_id in ("ha-node-2", "ha-node-3"):
        said = report.log_summary[node_id]
        gone = sum(n for k, n in said.items() if "database unreachable since" in k)
        back = sum(n for k, n in said.items() if "database reachable again" in k)
        assert gone >= 1 and back >= 1, (node_id, said)
    for node_id, said in report.log_summary.items():
        assert not said.get("tracebacks"), (node_id, said)
        assert not any("failed unexpectedly" in k for k in said), (node_id, said)
    # Each scheduler node ran work again after its own fault was over: it came back. (Not "each
    # node in each minute": the fastest two claim a quiet minute's 12 occurrences, prefetch
    # included, before the third's tick; both runs of the first version of this check saw it.)
    for node_id, disturbance in (("ha-node-2", killed), ("ha-node-3", cut), ("ha-node-1", node)):
        over_ms = run.db_ms(disturbance.at + (disturbance.rejoined_after_s or 0))
        after = [r["task_id"] for r in report.executions
                 for a in r["attempts"] if a.get("node_id") == node_id and (a.get("started_at") or 0) > over_ms]
        assert after, (node_id, disturbance.detail, owners)
