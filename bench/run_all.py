"""Every benchmark behind bench/RESULTS.md, one after the other, each output stamped.

For each step it writes ``<out>/<NN>-<name>.md``: the exact command, the commit (``+dirty`` when
the working tree differs from it), the date, the machine (cores, CPU model, load average, the
single-thread Python probe of limits.py) read just before the step, then the script's own
output (its tables) and its stderr. Nothing is averaged or edited: RESULTS.md quotes these
files. Run it on a quiet machine -- nothing else building or testing -- because the timings
and CPU figures are the point; a step that starts with a 1-minute load average above
``--max-load`` is flagged in its header (it still runs: the counts stay exact).

    .venv/bin/python bench/run_all.py --out /tmp/hai-bench            # everything, about 1.5 hours
    .venv/bin/python bench/run_all.py --only burst-postgresql --only steady-postgresql
    .venv/bin/python bench/run_all.py --list

Server databases are created and dropped by each script (``--backend``), or, for the scripts
that take a URL only, a database ``hai_bench_runall`` is created on the local servers and
reset by the script (``--url ... --reset``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import limits
from _common import create_database

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


@dataclass(frozen=True)
class Step:
    name: str
    script: str
    args: tuple[str, ...]
    needs_url: str | None = None  # "postgresql" / "mysql": a fresh hai_bench_runall database, passed as --url


def _netns() -> tuple[str, ...]:
    """far_db.py's nodes in their own network namespace when this process may make one."""
    return ("--netns",) if os.geteuid() == 0 and shutil.which("ip") else ()


def _steps() -> list[Step]:
    three = ("--backend", "sqlite", "--backend", "postgresql", "--backend", "mysql")
    return [
        Step("limits", "limits.py", ("--db", "sqlite", "--db", "postgresql", "--db", "mysql", "--seconds", "3")),
        Step("start-floor", "start_floor.py", (*three, "--count", "1000")),
        Step("burst-postgresql", "burst.py", ("--tasks", "10000", "--nodes", "2", "--reset"), "postgresql"),
        Step("burst-mysql", "burst.py", ("--tasks", "10000", "--nodes", "2", "--reset"), "mysql"),
        Step("burst-sqlite", "burst.py", ("--tasks", "10000", "--nodes", "2")),
        Step("steady-1000-c8", "steady.py", ("--backend", "postgresql", "--tasks", "1000", "--minutes", "3")),
        Step("steady-1000-c64", "steady.py",
             ("--backend", "postgresql", "--tasks", "1000", "--minutes", "3", "--concurrency", "64")),
        Step("steady-lateness-100", "steady.py", ("--backend", "postgresql", "--tasks", "100", "--minutes", "2")),
        Step("steady-lateness-500", "steady.py", ("--backend", "postgresql", "--tasks", "500", "--minutes", "2")),
        Step("idle", "idle.py", (*three, "--seconds", "30")),
        Step("notifications", "notifications.py", (*three, "--messages", "2000", "--ceiling-s", "2")),
        Step("peer-procrastinate", "peer_procrastinate.py", ("--tasks", "10000")),
        Step("far-db", "far_db.py", (*_netns(), "--rtt-ms", "0,1,10,50", "--burst-tasks", "1000",
                                    "--steady-tasks", "100", "--steady-minutes", "2", "--messages", "200",
                                    "--svg", "bench/far_db.svg")),
        Step("dashboard", "dashboard.py", ()),
        Step("compare", "compare.py", ("--backend", "postgresql", "--tasks", "10000")),
        Step("steady-sqlite-mysql", "steady.py",
             ("--backend", "sqlite", "--backend", "mysql", "--tasks", "1000", "--minutes", "3")),
        Step("list-params", "list_params.py", ("--backend", "postgresql")),
        Step("big-tables", "big_tables.py", ("--backend", "postgresql", "--rows", "10000000", "--chunk", "500000",
                                            "--retention")),
    ]


def _commit() -> str:
    head = limits.commit()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return f"{head}+dirty" if dirty else head


def run(step: Step, out: Path, number: int, max_load: float) -> int:
    argv = [sys.executable, str(BENCH / step.script), *step.args]
    if step.needs_url:
        target = create_database(step.needs_url, "hai_bench_runall", replace=True)
        argv += ["--url", target.url]
    facts = limits.machine()
    shown = " ".join(["bench/" + step.script if a == str(BENCH / step.script) else a for a in argv[1:]])
    header = [f"# {step.name}", "", "```", f".venv/bin/python {shown}", "```", "",
              f"- commit `{_commit()}`, started {facts['date_utc']}",
              f"- {limits.machine_line(facts)}"]
    if facts["load_avg_1m"] > max_load:
        header.append(f"- **not quiet**: 1-minute load average {facts['load_avg_1m']} > {max_load} at the start")
    began = time.monotonic()
    print(f"[run_all] {step.name}: {shown}", file=sys.stderr, flush=True)
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    header.append(f"- took {time.monotonic() - began:.0f} s, exit status {done.returncode}")
    path = out / f"{number:02d}-{step.name}.md"
    path.write_text("\n".join(header) + "\n\n## stdout\n\n" + done.stdout + "\n\n## stderr (last 60 lines)\n\n```\n"
                    + "\n".join(done.stderr.splitlines()[-60:]) + "\n```\n")
    print(f"[run_all] {step.name}: exit {done.returncode}, {path}", file=sys.stderr, flush=True)
    return done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("/tmp/hai-bench"), help="directory for the stamped outputs")
    parser.add_argument("--only", action="append", default=[], metavar="STEP", help="run only this step (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the steps and their commands")
    parser.add_argument("--max-load", type=float, default=0.6,
                        help="flag a step whose 1-minute load average exceeds this at its start")
    args = parser.parse_args()
    steps = _steps()
    names = {s.name for s in steps}
    unknown = [n for n in args.only if n not in names]
    if unknown:
        parser.error(f"--only: unknown step(s) {', '.join(unknown)}; --list shows them")
    if args.list:
        for step in steps:
            url = f" --url <fresh {step.needs_url} database> " if step.needs_url else ""
            print(f"{step.name:24} bench/{step.script} {' '.join(step.args)}{url}")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    failed = []
    for number, step in enumerate(steps, 1):
        if args.only and step.name not in args.only:
            continue
        if run(step, args.out, number, args.max_load) != 0:
            failed.append(step.name)
    if failed:
        print(f"[run_all] failed: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
