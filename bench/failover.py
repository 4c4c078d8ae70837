"""What a PostgreSQL failover costs the scheduler (issue #31, part 6), on a real pg_auto_failover
formation started by tests/ha/cluster.py (a monitor, a primary and a synchronous standby from
Debian's packages, on local ports, as the postgres user; needs ``postgresql-15-auto-failover``,
``pg-auto-failover-cli`` and, for clock-ahead, ``faketime``).

Each scenario is tests/ha/scenario.py's run: three scheduler nodes as OS processes on the
cluster's multi-host URL, 12 tasks (idempotent and not, hooks and HTTP requests to a local
receiver, 3 to 18 s each) due in each minute of a three-minute window that a DB-clock test offset
starts a few seconds ahead, judged by the fault suite's oracle at the end.

==================  ==========================================================================
none                no failover: the baseline
sigkill             SIGKILL of the primary (postmaster and pg_autoctl) once 8 handlers run
sigkill-boundary    the same, 2 s before the second minute begins: that minute falls due while
                    there is no primary
switchover          ``pg_autoctl perform switchover`` once 8 handlers run
clock-ahead         the standby's clock 5 s ahead (libfaketime), the primary SIGKILLed; lease 45 s
async-sigkill       sigkill on a formation whose standby is asynchronous (replication-quorum
                    false): commits the primary acknowledged may be lost in the failover, and a
                    lost claim may run an occurrence twice (issue #31, part 5)
==================  ==========================================================================

Per scenario it prints: how long no primary took writes, the time from the primary's death (or
the switchover's start) to the first handler started after it (on the new primary), the occurrences that fell due in
between and what became of them, the worst start lateness per minute, and over the window: due,
ran, missed, caught up, skipped, unknown, interrupted, takeovers, duplicate runs of
non-idempotent tasks, idempotent occurrences run again, and lost occurrences (no journal row,
or left running) -- the oracle's verdict.

    .venv/bin/python bench/failover.py                                  # every scenario, ~20 min
    .venv/bin/python bench/failover.py --scenario none --scenario sigkill-boundary --json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.ha.cluster import Cluster, unavailable_reason  # noqa: E402
from tests.ha.scenario import (  # noqa: E402
    FailoverRun,
    Report,
    kill_and_fail_over,
    save_evidence,
    switch_over,
)

SCENARIOS = ("none", "sigkill", "sigkill-boundary", "switchover", "clock-ahead", "async-sigkill")
LEASE_MS = 8_000
CLOCK_LEASE_MS = 45_000


def run_one(cluster: Cluster, name: str, workdir: Path, lease_ms: int) -> tuple[FailoverRun, Report]:
    run = FailoverRun(cluster, name, workdir / name, lease_ms=CLOCK_LEASE_MS if name == "clock-ahead" else lease_ms)
    try:
        run.start()
        if name in ("sigkill", "clock-ahead", "async-sigkill"):
            run.disturb("kill", lambda: kill_and_fail_over(cluster))
        elif name == "sigkill-boundary":
            run.disturb_at(run.minutes[1] - 2_000, "kill", lambda: kill_and_fail_over(cluster))
        elif name == "switchover":
            run.disturb("switchover", lambda: switch_over(cluster))
        run.finish()
        report = run.judge()
        save_evidence(run, report, run.workdir)
    finally:
        run.close()
    return run, report


def figures(run: FailoverRun, report: Report) -> dict[str, Any]:
    """The bench's row: the report's figures plus what happened between the death and the first handler."""
    f = dict(report.figures)
    first: dict[str, float] = {}
    for at, _, occ in report.starts:
        first.setdefault(occ, at)
    lateness: dict[int, float] = {}
    for row in report.executions:
        minute, occ = row["scheduled_minute"], row["occurrence_id"]
        if minute is None or occ not in first:
            continue
        late = (run.db_ms(first[occ]) - int(minute)) / 1000
        lateness[int(minute)] = max(lateness.get(int(minute), 0.0), late)
    f["worst_start_lateness_s"] = [round(lateness.get(m, float("nan")), 1) for m in run.minutes]
    f["disturbances"] = []
    for d in report.disturbances:
        end = d.at + (d.first_handler_after_s or 0)
        between = [r for r in report.executions if r["scheduled_minute"] is not None
                   and run.db_ms(d.at) <= int(r["scheduled_minute"]) <= run.db_ms(end)]
        f["disturbances"].append({
            "what": d.what, "into_minute_s": round(d.into_minute_s, 1),
            "no_writable_primary_s": None if d.unwritable_s is None else round(d.unwritable_s, 2),
            "new_primary_writable_after_s": None if d.writable_after_s is None else round(d.writable_after_s, 1),
            "old_primary_without_sync_standby_s": d.async_window_s,
            "whole_again_s": None if d.rejoined_after_s is None else round(d.rejoined_after_s, 1),
            "death_to_first_handler_s": None if d.first_handler_after_s is None else round(d.first_handler_after_s, 1),
            "due_in_between": len(between),
            "in_between_became": dict(sorted(_count(_became(r) for r in between).items())),
        })
    f["lost"] = f["unaccounted"]
    f["oracle_problems"] = report.problems
    return f


def _became(row: dict[str, Any]) -> str:
    return str(row["status"]) + ("" if row["trigger"] == "cron" else f"/{row['trigger']}")


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def show(name: str, f: dict[str, Any]) -> None:
    print(f"\n== {name}: {f['minutes']} minutes x {f['tasks']} tasks, 3 nodes, lease {f['lease_ms']} ms")
    for d in f["disturbances"]:
        lossy = d["old_primary_without_sync_standby_s"]
        if lossy is not None:  # hapostgres/pg_auto_failover#774: see tests/ha/README.md
            print(f"   !! the old primary took writes without its synchronous standby for {lossy:.0f} s: acknowledged "
                  "commits were lost by the topology (pg_auto_failover#774); the figures below are not the scheduler's")
        print(f"   {d['what']} {d['into_minute_s']} s into its minute: no writable primary for "
              f"{d['no_writable_primary_s']} s (whole again after {d['whole_again_s']} s); death -> first handler "
              f"{d['death_to_first_handler_s']} s; due in between: {d['due_in_between']} {d['in_between_became']}")
    print(f"   worst start lateness per minute (s): {f['worst_start_lateness_s']}")
    print(f"   due {f['due']}, ran {f['ran']}, missed {f['missed']}, caught up {f['caught_up']}, "
          f"skipped {f['skipped']}, unknown {f['unknown_seen']} {f['unknown_reasons']}, "
          f"interrupted {f['interrupted']}, takeovers {f['takeovers']}")
    print(f"   duplicates (non-idempotent) {f['duplicates']}, idempotent run again {f['idempotent_repeats']}, "
          f"lost {f['lost']}, oracle problems {len(f['oracle_problems'])}")
    print(f"   receiver: {f['requests']} requests for {f['request_keys']} Idempotency-Keys (at most "
          f"{f['max_requests_per_key']} per key; a receiver that honours the key acts once per key)")
    for problem in f["oracle_problems"][:10]:
        print(f"     {problem}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", action="append", choices=SCENARIOS,
                        help="repeatable; default: all of them, in the order above")
    parser.add_argument("--lease-ms", type=int, default=LEASE_MS, help="the nodes' lease (clock-ahead: 45000)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep node logs and evidence here")
    parser.add_argument("--json", action="store_true", help="also print every row as one JSON object")
    args = parser.parse_args()
    problem = unavailable_reason()
    if problem:
        raise SystemExit(f"error: {problem}")
    chosen = args.scenario or list(SCENARIOS)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="hai-bench-failover-"))
    rows: dict[str, dict[str, Any]] = {}
    shared: Cluster | None = None
    began = time.monotonic()
    try:
        for name in chosen:
            if name in ("clock-ahead", "async-sigkill"):
                own = Cluster(standby_faketime="+5s", verbose=False) if name == "clock-ahead" else \
                    Cluster(synchronous=False, verbose=False)
                with own as cluster:
                    run, report = run_one(cluster, name, workdir, args.lease_ms)
            else:
                if shared is None:
                    shared = Cluster(verbose=False).start()
                run, report = run_one(shared, name, workdir, args.lease_ms)
            rows[name] = figures(run, report)
            show(name, rows[name])
    finally:
        if shared is not None:
            shared.stop()
    print(f"\n{len(rows)} scenario(s) in {time.monotonic() - began:.0f} s; node logs and evidence under {workdir}")
    if args.json:
        print(json.dumps(rows, default=str))


if __name__ == "__main__":
    main()
