"""Issue #31, part 4: a PostgreSQL failover runs no job twice and loses none -- proved on a real
pg_auto_failover formation (tests/ha/cluster.py) with three scheduler nodes as OS processes on its
multi-host URL, a mix of idempotent and non-idempotent hook and HTTP tasks, judged by the fault
suite's oracle (tests/helpers/oracle.py) plus the HTTP receiver's record (tests/ha/scenario.py).

=============================  ===============================================================
scenario                       what is done while handlers run
=============================  ===============================================================
SIGKILL in a busy minute       the primary's postmaster and pg_autoctl are killed (a machine
                               gone): the standby is promoted; the old primary rejoins
three SIGKILLs in a row        the same, three times, each once the old primary is back as a
                               synchronous standby and handlers run again
planned switchover             ``pg_autoctl perform switchover``; first, the old primary's
                               keeper log must show that it never took writes without its
                               synchronous standby (hapostgres/pg_auto_failover#774 does that);
                               last, well under a second without a writable primary against an
                               8 s lease must cost no execution (none taken over, unknown or
                               interrupted)
a standby 5 s ahead            the standby's server runs under libfaketime +5 s; the primary
                               is killed: every node must see the database clock jump,
                               journal it on its node row, and lose no lease to it (lease
                               45 s: the outage and the jump fit in the two thirds of a
                               lease a renewal leaves, docs/semantics.md T10); nor may the
                               ~10 s outage itself cost an execution, as for the switchover
=============================  ===============================================================

Each run spans three DB-clock minutes (the test offset puts the first a few seconds ahead; at
least one of them begins after the topology is whole again), is settled, its nodes stopped
cleanly, and judged over the whole window: 0 duplicate runs of a non-idempotent task, every due
occurrence accounted for, nothing left running. An "operator" resolves each unknown execution
after looking at the receiver (counted first). Figures are printed (``-s``); evidence (node logs,
journal, requests, report) is kept under test-output/ha/<scenario>/ (``HAI_TEST_OUTPUT`` moves
it). The last test reads the node logs of the scenarios that ran: the issue asks that an outage
be said once, not a traceback per tick.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.ha.cluster import Cluster
from tests.ha.scenario import MIX, NODE_IDS, Disturbance, FailoverRun, Report, run_scenario, save_evidence

pytestmark = [pytest.mark.ha, pytest.mark.slow, pytest.mark.timeout(900)]
LEASE_MS = 8_000  # short: leases run out during a failover's ~10 s outage, so takeovers and settlements happen
CLOCK_LEASE_MS = 45_000  # the clock scenario's: 2/3 of it (30 s) holds the outage (~11 s) plus the 5 s jump
JUMP_MS = 5_000
OUTPUT = Path(os.environ.get("HAI_TEST_OUTPUT") or Path(__file__).resolve().parents[2] / "test-output") / "ha"
REPORTS: dict[str, Report] = {}  # the scenarios run in this session, for the log test


def _scenario(cluster: Cluster, name: str, actions: list[str], lease_ms: int = LEASE_MS,
              minutes: int = 3) -> Report:
    run = FailoverRun(cluster, name, OUTPUT / name, lease_ms=lease_ms, minutes=minutes)
    try:
        report = run_scenario(run, actions)
        save_evidence(run, report, run.workdir)
    finally:
        run.close()
    REPORTS[name] = report
    print("\n" + report.summary() + f"\n[ha]   evidence: {run.workdir}", flush=True)
    return report


def _judged(report: Report) -> None:
    """The issue's verdict: nothing ran twice that may not, nothing was lost, the oracle is content."""
    figures = report.figures
    assert figures["duplicates"] == 0, "a non-idempotent task ran twice:\n" + "\n".join(report.problems)
    assert figures["unaccounted"] == 0, "occurrences unaccounted for:\n" + "\n".join(report.problems)
    assert figures["rows"] == figures["due"], figures
    assert report.problems == [], "\n".join(report.problems)
    assert figures["repeats_share_key"], "an idempotent occurrence ran again under another Idempotency-Key"
    assert figures["undisturbed_minutes"] >= 1, "no minute ran on a whole topology after the disturbances"


def test_sigkill_of_the_primary_in_a_busy_minute(ha_cluster: Cluster) -> None:
    report = _scenario(ha_cluster, "sigkill", ["kill"])
    _judged(report)
    (kill,) = report.disturbances
    assert kill.new_primary != kill.old_primary
    assert kill.first_handler_after_s is not None, "no handler started after the failover"


def test_three_sigkills_in_a_row(ha_cluster: Cluster) -> None:
    report = _scenario(ha_cluster, "three-sigkills", ["kill", "kill", "kill"])
    _judged(report)
    assert [d.what for d in report.disturbances] == ["kill"] * 3
    assert all(d.new_primary != d.old_primary for d in report.disturbances)
    assert all(d.first_handler_after_s is not None for d in report.disturbances)


def test_planned_switchover(ha_cluster: Cluster) -> None:
    report = _scenario(ha_cluster, "switchover", ["switchover"])
    (switch,) = report.disturbances
    assert switch.new_primary != switch.old_primary
    # The premise of every promise here: the database loses no commit it acknowledged. When the
    # topology broke it (an upstream bug, not ours), this run proves nothing about the scheduler:
    # it is reported as an expected failure with the evidence, never as a pass.
    if switch.async_window_s is not None:
        pytest.xfail(
            f"not the scheduler: the HA topology lost acknowledged commits. pg_auto_failover's monitor sent the old "
            f"primary {switch.old_primary} to wait_primary (synchronous replication off) instead of draining when the "
            f"switchover began, and it kept acknowledging commits for {switch.async_window_s:.0f} s until "
            f"its demotion; pg_rewind then discarded them (hapostgres/pg_auto_failover#774, in Debian's "
            f"pg_auto_failover 2.0). What "
            f"the oracle made of the journal that survived:\n" + "\n".join(report.problems))
    _judged(report)
    # Well under a second without a writable primary, against an 8 s lease: nothing may be lost to it.
    assert switch.unwritable_s is not None and switch.unwritable_s * 1000 < LEASE_MS / 3, switch
    _no_casualties(report, switch, LEASE_MS)


def test_failover_to_a_standby_whose_clock_is_5s_ahead(ha_cluster_factory: Callable[..., Cluster]) -> None:
    cluster = ha_cluster_factory(standby_faketime="+5s")
    assert cluster.primary().name == "node1" and cluster.standby().faketime == "+5s"
    report = _scenario(cluster, "clock-ahead", ["kill"], lease_ms=CLOCK_LEASE_MS)
    _judged(report)
    (kill,) = report.disturbances
    assert kill.new_primary == "node2", "the failover must hand the clock to the faked standby"
    # The lease was chosen so that the outage plus the jump fit in what a renewal leaves (2/3 lease).
    assert kill.writable_after_s is not None
    assert kill.writable_after_s * 1000 + JUMP_MS < CLOCK_LEASE_MS * 2 / 3, kill

    # Every node saw the jump, journaled it on its node row and logged it.
    jumps = {row["node_id"]: (row["clock_jump_ms"], row["clock_jump_at"]) for row in report.node_rows}
    print(f"[ha]   journaled clock jumps (ms, at): {jumps}")
    for node in NODE_IDS:
        jump, at = jumps[node]
        assert jump is not None and at is not None, f"{node} did not journal the clock jump: {jumps}"
        assert JUMP_MS - 1_500 <= int(jump) <= JUMP_MS + 1_500, f"{node} journaled a jump of {jump} ms"
        assert "the database clock jumped" in report.logs[node], f"{node} did not log the jump"

    # No lease was lost to the jump: every handler still running when the new primary took writes
    # finished under its own lease (renewed on the jump), and no renewal was refused.
    back = kill.at + kill.writable_after_s
    seconds = {t.id: t.seconds for t in MIX}
    rows = {r["occurrence_id"]: r for r in report.executions}
    across = sorted({occ for at, task, occ in report.starts if at < kill.at and at + seconds[task] > back + 0.5})
    print(f"[ha]   handlers running across the failover: {[rows[o]['task_id'] for o in across]}")
    assert across, "no handler ran across the failover: the scenario proves nothing about the jump"
    lost_to_jump = [_row(rows[o]) for o in across if (rows[o]["status"], rows[o]["sequence"]) != ("success", 1)]
    assert not lost_to_jump, "a lease was lost to the jump:\n" + "\n".join(lost_to_jump)
    assert not any("lease lost" in text for text in report.logs.values()), report.log_summary

    _no_casualties(report, kill, CLOCK_LEASE_MS)


def _no_casualties(report: Report, disturbance: Disturbance, lease_ms: int) -> None:
    """The issue, part 1: an outage the lease outlasts costs no execution. A handler that ended
    while there was no primary keeps its result and writes it once the primary is back; a claimed
    execution whose begin could not be written begins once it can. Nothing may be taken over,
    unknown or interrupted because of it."""
    assert disturbance.unwritable_s is not None
    back = disturbance.at + disturbance.unwritable_s
    seconds = {t.id: t.seconds for t in MIX}
    casualties = [_row(r, back, report.starts, seconds) for r in report.executions
                  if int(r["sequence"]) > 1 or r["reason"] in ("lease_expired", "owner_lost_before_start",
                                                               "attempts_exhausted")]
    assert not casualties, (f"{len(casualties)} execution(s) lost to {disturbance.unwritable_s:.1f} s without a "
                            f"writable primary under a {lease_ms} ms lease:\n" + "\n".join(casualties))


def _row(row: dict[str, Any], back: float | None = None, starts: list[tuple[float, str, str]] | None = None,
         seconds: dict[str, float] | None = None) -> str:
    """One journal row for a failure message: what it became and what its attempts say."""
    attempts = "; ".join(f"attempt {a.get('attempt')} seq {a.get('sequence')} on {a.get('node_id')}: {a.get('status')}"
                         f"{' (' + str(a.get('error'))[:70] + ')' if a.get('error') else ''}" for a in row["attempts"])
    text = (f"{row['task_id']} {row['occurrence_id'][:8]}: {row['status']} ({row['reason']}), sequence "
            f"{row['sequence']}; {attempts or 'no attempt'}")
    if back is not None and starts is not None and seconds is not None:
        ran = [at for at, _, occ in starts if occ == row["occurrence_id"]]
        if ran:
            ended = min(ran) + seconds[row["task_id"]]
            text += f"; its first handler ended {ended - back:+.1f} s from the moment a primary took writes again"
        else:
            text += "; its handler never ran"
    return text


def test_the_node_logs_say_an_outage_without_tracebacks() -> None:
    """The issue: while there is no primary, nodes back off and say so once in the log. A
    traceback per failed tick, or a runner that "failed unexpectedly", is not that."""
    if not REPORTS:
        pytest.fail("run this test with the scenarios above: it reads the logs of those that ran")
    found = []
    for name, report in REPORTS.items():
        for node, counts in report.log_summary.items():
            tracebacks = counts.get("tracebacks", 0)
            crashes = sum(n for k, n in counts.items() if "failed unexpectedly" in k)
            if tracebacks or crashes:
                top = "; ".join(f"{k} x{n}" for k, n in list(counts.items())[:6])
                found.append(f"{name}/{node}: {tracebacks} tracebacks, {crashes} runners failed unexpectedly ({top})")
    assert not found, "\n".join(found)
