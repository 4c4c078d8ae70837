"""The database far away: burst throughput, steady lateness and notification deliveries per
second when every round trip to the database costs 1, 10 or 50 ms more (issue #17, item 4).

By default (``--delay proxy``) the nodes reach the database through bench/_delay_proxy.py, a TCP
proxy that holds every byte for half the added round trip in each direction: the same latency per
round trip as a slow link, no bandwidth limit, no loss, and it needs no kernel support. With
``--netns --delay netem`` the delay is the kernel's instead: a ``tc netem`` qdisc on each end of
the veth pair delays every packet by half the round trip, and the proxy adds nothing. The run
that RESULTS.md reports used the proxy: that host's kernel had no netem qdisc ("Specified qdisc
kind is unknown"), which far_db.py checks before it measures anything.

Each row is measured by the existing benchmarks (burst.py, steady.py, notifications.py) run as
child processes with ``--url`` pointing at the proxy; without ``--netns`` the first row (0 ms
added) goes straight to the database, and every other row is also shown as a share of it,
measured in the same invocation.

With ``--netns`` (root, ``ip`` from iproute2) the benchmarks and their node processes run in
their own network namespace (``hai-far-nodes``), joined to this one by a veth pair: they reach
the database only across it, through the proxy listening on the host side of the pair
(10.231.0.1). The 0 ms row then goes through the proxy too, with nothing added: the database
listens on the loopback, which the namespace does not share.

Every row is also read against this host's own limits *at that delay*, measured through the
same proxy in the same row: burst.py first measures the one-transaction ceiling (bench/limits.py,
claim + finish + log in one transaction on one connection, 2 s), and the burst's starts and the
deliveries per second are printed as a share of it; steady.py first measures the start floor
(bench/start_floor.py: the claim and begin writes alone, best of ``--floor-rounds``), and the
steady lateness is printed as a multiple of it. A share of the 0 ms row says how much the
delay costs; a share of the row's own ceiling says how much of what the database still allows,
that far away, the nodes use.

Lease safety is read from the same runs: ``duplicates`` counts occurrences journaled twice,
handlers called twice and executions taken over (sequence > 1); with the default lease settings
it must stay 0 at every delay.

    .venv/bin/python bench/far_db.py --rtt-ms 0,1,10,50 --svg bench/far_db.svg
    .venv/bin/python bench/far_db.py --netns --rtt-ms 0,1,10,50 --svg bench/far_db.svg   # as root
    .venv/bin/python bench/far_db.py --netns --delay netem --rtt-ms 0,1,10,50   # root, a kernel with netem
    .venv/bin/python bench/far_db.py --rtt-ms 0,10 --burst-tasks 500 --steady-tasks 100 --steady-minutes 1 \\
        --messages 200          # quick

It needs a PostgreSQL server (``--url``, default the local one) and clears the scheduler tables
of the database it is given (default ``hai_bench_far``, created when missing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import limits
from _delay_proxy import DelayProxy
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

HERE = Path(__file__).resolve().parent
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/hai_bench_far"
NETNS = "hai-far-nodes"
HOST_SIDE, NODE_SIDE = ("hai-far-h", "10.231.0.1"), ("hai-far-n", "10.231.0.2")


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


@contextlib.contextmanager
def node_namespace() -> Iterator[list[str]]:
    """A network namespace for the nodes, joined to this one by a veth pair; yields the command
    prefix that runs a process inside it. Removed afterwards (and a leftover one first)."""
    (host_dev, host_ip), (node_dev, node_ip) = HOST_SIDE, NODE_SIDE
    _ip("link", "del", host_dev, check=False)
    _ip("netns", "del", NETNS, check=False)
    try:
        _ip("netns", "add", NETNS)
        _ip("link", "add", host_dev, "type", "veth", "peer", "name", node_dev)
        _ip("link", "set", node_dev, "netns", NETNS)
        _ip("addr", "add", f"{host_ip}/30", "dev", host_dev)
        _ip("link", "set", host_dev, "up")
        _ip("-n", NETNS, "addr", "add", f"{node_ip}/30", "dev", node_dev)
        _ip("-n", NETNS, "link", "set", node_dev, "up")
        _ip("-n", NETNS, "link", "set", "lo", "up")
        yield ["ip", "netns", "exec", NETNS]
    finally:
        _ip("link", "del", host_dev, check=False)
        _ip("netns", "del", NETNS, check=False)


def _tc(*args: str, prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*(prefix or []), "tc", *args], capture_output=True, text=True)


def netem_refusal() -> str | None:
    """Why ``tc netem`` cannot delay the veth pair here (None when it can): tried on the pair
    itself, with nothing added, and taken off again."""
    done = _tc("qdisc", "replace", "dev", HOST_SIDE[0], "root", "netem", "delay", "0ms")
    if done.returncode != 0:
        return (done.stderr or done.stdout).strip() or f"tc exited {done.returncode}"
    _tc("qdisc", "del", "dev", HOST_SIDE[0], "root")
    return None


def set_netem(rtt_ms: float, prefix: list[str]) -> None:
    """Half of ``rtt_ms`` on each end of the veth pair (both directions); 0 takes the qdiscs off.
    ``limit`` is raised from netem's 1,000 packets so a burst at 50 ms is delayed, not dropped."""
    for device, inside in ((HOST_SIDE[0], None), (NODE_SIDE[0], prefix)):
        if not rtt_ms:
            _tc("qdisc", "del", "dev", device, "root", prefix=inside)
            continue
        done = _tc("qdisc", "replace", "dev", device, "root", "netem", "delay", f"{rtt_ms / 2:g}ms",
                   "limit", "100000", prefix=inside)
        if done.returncode != 0:
            raise RuntimeError(f"tc netem on {device}: {(done.stderr or done.stdout).strip()}")


def _ensure_database(url: str) -> None:
    parsed = make_url(url)
    admin = create_engine(parsed.set(drivername="postgresql+psycopg", database="postgres"),
                          isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if not conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": parsed.database}).scalar():
            conn.execute(text(f'CREATE DATABASE "{parsed.database}"'))
    admin.dispose()


def _json_rows(output: str) -> list[dict[str, Any]]:
    rows = []
    for line in output.splitlines():
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows


def _run(script: str, args: list[str], timeout_s: float, prefix: list[str]) -> dict[str, Any]:
    command = [*prefix, sys.executable, str(HERE / script), *args, "--reset", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=HERE.parent)
    rows = _json_rows(done.stdout)
    if done.returncode != 0 or not rows:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        return {"error": f"{script} exited {done.returncode}: {' | '.join(tail)}"}
    return rows[-1]


def measure(url: str, rtt_ms: float, args: argparse.Namespace, prefix: list[str]) -> dict[str, Any]:
    """One row: the three benchmarks with ``rtt_ms`` added to every round trip (run after
    ``prefix``: inside the nodes' namespace, where the proxy is the only way to the database)."""
    parsed = make_url(url)
    upstream = (parsed.host or "127.0.0.1", parsed.port or 5432)
    proxy: DelayProxy | None = None
    if args.delay == "netem":  # the kernel delays the veth pair; the proxy only forwards
        set_netem(rtt_ms, prefix)
        proxy = DelayProxy(upstream, 0, HOST_SIDE[1])
    elif prefix:  # the namespace reaches the database only through the proxy, 0 ms too
        proxy = DelayProxy(upstream, rtt_ms / 2, HOST_SIDE[1])
    elif rtt_ms:
        proxy = DelayProxy(upstream, rtt_ms / 2)
    target = proxy.url(url) if proxy else url
    try:
        burst = _run("burst.py", ["--url", target, "--tasks", str(args.burst_tasks), "--nodes", "2"], 1800, prefix)
        steady = _run("steady.py", ["--url", target, "--tasks", str(args.steady_tasks), "--minutes",
                                    str(args.steady_minutes), "--nodes", "2", "--ceiling-s", "0",
                                    "--floor-rounds", str(args.floor_rounds)], 600 + 120 * args.steady_minutes,
                      prefix)
        notes = _run("notifications.py", ["--url", target, "--messages", str(args.messages), "--nodes", "2",
                                          "--mode", "loop"], 1800, prefix)
    finally:
        if proxy:
            proxy.close()
        if args.delay == "netem":
            set_netem(0, prefix)
    errors = [part.get("error") for part in (burst, steady, notes) if part.get("error")]
    ceiling = (burst.get("ceiling") or {}).get("one_tx_per_s")
    return {
        "rtt_added_ms": rtt_ms, "ceiling_one_tx_per_s": ceiling,
        "burst_starts_per_s": burst.get("starts_per_s"), "burst_all_started_s": burst.get("seconds_to_all_started"),
        "burst_ceiling_share": limits.share(burst.get("starts_per_s"), ceiling),
        "burst_duplicates": burst.get("duplicates"), "burst_missed": burst.get("missed"),
        "steady_lateness_p50_ms": steady.get("lateness_p50_ms"),
        "steady_lateness_p99_ms": steady.get("lateness_p99_ms"),
        "steady_floor_p50_ms": steady.get("floor_p50_ms"), "steady_floor_p99_ms": steady.get("floor_p99_ms"),
        "steady_p50_over_floor": steady.get("p50_over_floor"), "steady_p99_over_floor": steady.get("p99_over_floor"),
        "steady_duplicates": steady.get("duplicates"), "steady_missing": steady.get("missing"),
        "deliveries_per_s": notes.get("deliveries_per_s"),
        "delivery_ceiling_share": limits.share(notes.get("deliveries_per_s"), ceiling),
        "delivery_duplicate_effects": notes.get("effect_duplicates"),
        "delivery_lost": notes.get("lost"),
        "error": "; ".join(str(e) for e in errors) or None,
    }


COLUMNS = [("rtt_added_ms", "RTT added ms"), ("ceiling_one_tx_per_s", "one-tx ceiling/s"),
           ("burst_starts_per_s", "burst starts/s"), ("burst_ceiling_share", "% of ceiling"),
           ("burst_share", "of 0 ms"), ("burst_all_started_s", "all started s"),
           ("burst_duplicates", "dup"), ("burst_missed", "missed"),
           ("steady_lateness_p50_ms", "steady p50 ms"), ("steady_lateness_p99_ms", "p99 ms"),
           ("steady_floor_p50_ms", "floor p50 ms"), ("steady_p50_over_floor", "p50 / floor"),
           ("steady_p99_over_floor", "p99 / floor"),
           ("steady_duplicates", "dup"), ("steady_missing", "missing"),
           ("deliveries_per_s", "deliveries/s"), ("delivery_ceiling_share", "% of ceiling"),
           ("delivery_share", "of 0 ms"),
           ("delivery_duplicate_effects", "dup effects"), ("delivery_lost", "lost")]


def _shares(rows: list[dict[str, Any]]) -> None:
    base = next((r for r in rows if r["rtt_added_ms"] == 0), None)
    for row in rows:
        for key, share in (("burst_starts_per_s", "burst_share"), ("deliveries_per_s", "delivery_share")):
            if base and base.get(key) and row.get(key) is not None:
                row[share] = f"{100 * row[key] / base[key]:.0f}%"


def _table(rows: list[dict[str, Any]]) -> str:
    def cell(value: Any) -> str:
        if value is None:
            return "-"
        return f"{value:,.1f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(title for _, title in COLUMNS) + " |",
             "|" + "---:|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(row.get(key)) for key, _ in COLUMNS) + " |" for row in rows]
    return "\n".join(lines)


def svg(rows: list[dict[str, Any]], title: str) -> str:
    """Three small line charts (burst starts/s beside the one-transaction ceiling at each delay,
    steady lateness p50/p99, deliveries/s) against the added round trip, as a standalone SVG."""
    panels = [("burst starts / s; one-tx ceiling / s", [("burst_starts_per_s", "#1f77b4"),
                                                         ("ceiling_one_tx_per_s", "#ff7f0e")]),
              ("steady lateness ms (p50, p99)", [("steady_lateness_p50_ms", "#2ca02c"),
                                                  ("steady_lateness_p99_ms", "#d62728")]),
              ("deliveries / s", [("deliveries_per_s", "#9467bd")])]
    width, height, pad = 300, 220, 40
    xs = [float(r["rtt_added_ms"]) for r in rows]
    x_max = max(xs) or 1.0
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * 3}" height="{height + 30}" '
             f'font-family="sans-serif" font-size="11">',
             f'<text x="10" y="16" font-size="13">{title}</text>']
    for index, (label, series) in enumerate(panels):
        left = index * width
        values = [float(r[key]) for r in rows for key, _ in series if r.get(key) is not None]
        y_max = max(values, default=1.0) * 1.1 or 1.0

        def point(x: float, y: float, left: int = left, y_max: float = y_max) -> tuple[float, float]:
            return (left + pad + (width - 2 * pad) * x / x_max, 30 + height - pad - (height - 2 * pad) * y / y_max)

        x0, y0 = point(0, 0)
        x1, _ = point(x_max, 0)
        _, y1 = point(0, y_max)
        parts.append(f'<text x="{left + pad}" y="{30 + 12}">{label}</text>')
        parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#555"/>')
        parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#555"/>')
        parts.append(f'<text x="{x0 - 4}" y="{y1 + 4}" text-anchor="end">{y_max:,.0f}</text>')
        for x in xs:
            px, _ = point(x, 0)
            parts.append(f'<text x="{px}" y="{y0 + 14}" text-anchor="middle">{x:g}</text>')
        parts.append(f'<text x="{(x0 + x1) / 2}" y="{y0 + 28}" text-anchor="middle">RTT added, ms</text>')
        for key, colour in series:
            points = [point(float(r["rtt_added_ms"]), float(r[key])) for r in rows if r.get(key) is not None]
            if points:
                path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
                parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
                parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in points]
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=DEFAULT_URL, help="PostgreSQL database (its scheduler tables are cleared)")
    parser.add_argument("--rtt-ms", default="0,1,10,50", help="round trips to add, comma-separated (0: direct)")
    parser.add_argument("--burst-tasks", type=int, default=2000)
    parser.add_argument("--steady-tasks", type=int, default=200)
    parser.add_argument("--steady-minutes", type=int, default=2)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--floor-rounds", type=int, default=3, choices=range(0, 21), metavar="0..20",
                        help="start-floor rounds before each steady run (steady.py --floor-rounds; 0 skips it)")
    parser.add_argument("--netns", action="store_true",
                        help="run the benchmarks and their nodes in their own network namespace (root, iproute2)")
    parser.add_argument("--delay", choices=("proxy", "netem"), default="proxy",
                        help="who adds the delay: the user-space proxy (default) or tc netem on the veth pair "
                             "(needs --netns and a kernel with the netem qdisc)")
    parser.add_argument("--svg", help="write the curves to this SVG file")
    parser.add_argument("--json", action="store_true", help="also print every row as JSON")
    args = parser.parse_args()
    try:
        rtts = [float(value) for value in args.rtt_ms.split(",")]
    except ValueError:
        parser.error(f"--rtt-ms: {args.rtt_ms!r} is not a comma-separated list of numbers")
    if any(not 0 <= rtt <= 1000 for rtt in rtts):
        parser.error("--rtt-ms: each value must be between 0 and 1000")
    if args.netns and (os.geteuid() != 0 or shutil.which("ip") is None):
        parser.error("--netns: needs root and the ip command (iproute2) to make the nodes' network namespace")
    if args.delay == "netem" and not args.netns:
        parser.error("--delay netem: needs --netns (netem delays the veth pair between the nodes and the database)")
    if args.delay == "netem" and shutil.which("tc") is None:
        parser.error("--delay netem: needs the tc command (iproute2)")
    if make_url(args.url).get_backend_name() != "postgresql":
        parser.error("--url: a PostgreSQL URL (the far-away database is a server)")
    _ensure_database(args.url)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = []
    with node_namespace() if args.netns else contextlib.nullcontext([]) as prefix:
        refusal = netem_refusal() if args.delay == "netem" else None
        if refusal:
            sys.exit(f"far_db.py: --delay netem: tc cannot add a netem qdisc here ({refusal}); "
                     "use --delay proxy, which adds the same delay in user space")
        for rtt in rtts:
            inside = f" (nodes in namespace {NETNS})" if prefix else ""
            print(f"measuring with {rtt:g} ms added per round trip{inside} ...", flush=True)
            rows.append(measure(args.url, rtt, args, prefix))
    _shares(rows)
    where = f"nodes in network namespace {NETNS}, " if args.netns else ""
    where += "delay by tc netem, " if args.delay == "netem" else "delay by the proxy, "
    print(f"\nDatabase far away ({started}; {where}burst {args.burst_tasks} tasks, steady {args.steady_tasks} tasks x "
          f"{args.steady_minutes} min, {args.messages} notifications; 2 nodes each)\n")
    print(_table(rows))
    if args.json:
        for row in rows:
            print(json.dumps(row))
    if args.svg:
        Path(args.svg).write_text(svg(rows, f"hai-scheduler, database far away ({started})"))
        print(f"\ncurves: {args.svg}")
    failed = [row for row in rows if row.get("error")]
    for row in failed:
        print(f"{row['rtt_added_ms']:g} ms: FAILED -- {row['error']}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
