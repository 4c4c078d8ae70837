"""Notification queue: N messages (default 10,000) held by do-not-disturb, released at its end.

Every message goes through ``Reach.send`` while the do-not-disturb window (strategy ``delay``)
is on, so each becomes a committed ``pending`` row due at the window's end. K node processes
(default 2) then deliver them to a webhook receiver: a real HTTP server on 127.0.0.1 in this
process that records each request's ``Idempotency-Key`` and recipient, and deduplicates by key
as an idempotent provider does.

Two ways to run the rounds (``--mode``):
- ``tick`` (default, production): each node is a scheduler with Reach attached. On the first
  tick of a minute a round starts (at most 100 rows); while rounds come back full,
  the next one follows at once (``Reach._round_in_background``), so a backlog drains at
  delivery speed, not at 100 rows per minute per node.
- ``loop``: the nodes call ``Reach.run_round()`` back to back (no scheduler, no tick): the
  delivery path alone, for comparison.

Clock: the test-only DB clock offset is used twice and only to *place* the run: at a time
inside the window while the messages are sent, and ``--lead-s`` seconds before the window's end
when the nodes start. It never moves through minutes: every minute of a tick run is a real one.

Reported: deliveries per second (receiver clock, first to last request), time from the window's
end to the first and the last delivery, deliveries per second inside a round, raw duplicates
(requests beyond one per message) and duplicate effects after the receiver's deduplication by
key, lost messages (neither received nor visible as dead/unknown; must be 0), CPU per node, and
the nodes' SQL per delivery: statements (cursor statements), transactions (commits and
rollbacks) and round trips (every SQL command sent: statements, commits, rollbacks, and on a
server the driver's BEGIN and the pool's pre-ping at each check-out). A round claims, marks and
settles ``--concurrency`` rows at a time (a wave), so the SQL per delivery falls as it grows.

With ``--ceiling-s S`` it first measures this host's ceiling on the same database (bench/limits.py,
S seconds per operation) and prints deliveries per second as a share of its one-transaction rate
(claim + finish + log of one execution in one transaction): a delivery's own writes (claim, mark,
settle) are of that size, and the share travels between machines where deliveries per second do not.

    .venv/bin/python bench/notifications.py --messages 10000 --backend postgresql
    .venv/bin/python bench/notifications.py --messages 10000 --backend postgresql --mode loop
    .venv/bin/python bench/notifications.py --messages 2000 --backend postgresql --ceiling-s 2
    .venv/bin/python bench/notifications.py --messages 400 --no-idempotent                  # SQLite
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import limits
from _common import (
    MINUTE_MS,
    Target,
    add_common_args,
    base_parser,
    fetch,
    finish,
    kill_all,
    next_boundary,
    offset_for,
    prepare,
    run_on_targets,
    scalar,
    spawn,
    sql_per,
    stop_all,
    wait_until,
)
from _receiver import Receiver
from sqlalchemy import func, select

from scheduler_core.db import close_engine
from scheduler_core.db.tables import reach_queue
from scheduler_core.reach import Reach
from scheduler_core.testing import set_clock_offset

COLUMNS = [("backend", "database"), ("mode", "rounds"), ("messages", "messages"), ("nodes", "nodes"),
           ("enqueue_per_s", "enqueued / s"), ("deliveries_per_s", "deliveries / s"),
           ("ceiling_share", "% of one-tx ceiling"),
           ("round_rate", "deliveries / s in a round (per node)"), ("first_after_s", "first after end s"),
           ("drained_after_s", "last after end s"), ("sent", "sent"), ("raw_duplicates", "raw duplicates"),
           ("effect_duplicates", "duplicate effects"), ("lost", "lost"), ("dead_unknown", "dead / unknown"),
           ("statements_per_delivery", "statements / delivery"),
           ("transactions_per_delivery", "transactions / delivery"),
           ("sql_commands_per_delivery", "round trips / delivery"),
           ("cpu_s", "CPU s / node")]
TERMINAL = ("sent", "dead", "unknown", "discarded")


def reach_config(receiver_url: str, window_end: int, idempotent: bool, senders: int) -> dict[str, Any]:
    """A webhook provider to the receiver, a 3-hour delay window ending at ``window_end``, and
    ``senders`` deliveries at once per round (``queue.concurrency``)."""

    def wall(ms: int) -> str:
        return time.strftime("%H:%M", time.gmtime(ms / 1000))

    return {"providers": [{"name": "hook", "type": "api", "url": receiver_url, "idempotent": idempotent,
                           "timeout_ms": 10_000}],
            "dnd": {"enabled": True, "strategy": "delay", "start": wall(window_end - 180 * MINUTE_MS),
                    "end": wall(window_end), "timezone": "UTC"},
            "queue": {"concurrency": senders}}


def enqueue(engine: Any, config: dict[str, Any], count: int, offset: int) -> float:
    """Send ``count`` messages with the DB clock inside the window; returns the seconds taken."""
    set_clock_offset(engine, offset)
    try:
        sender = {**config, "queue": {**config["queue"], "concurrency": 1}}  # this process only enqueues
        reach = Reach(engine, sender, node_id="bench-sender")
        reach.init()
        began = time.monotonic()
        for i in range(count):
            result = reach.send({"provider": "hook", "to": f"user-{i:06d}", "body": f"message {i}"})
            if not result.deferred:
                raise RuntimeError(f"message {i} was not deferred: the clock is not inside the window")
        return time.monotonic() - began
    finally:
        set_clock_offset(engine, 0)


def measure(target: Target, count: int, node_count: int, mode: str, idempotent: bool, lead_s: float,
            senders: int, receiver_ms: int, ceiling_s: float = 0) -> dict[str, Any]:
    ceiling = limits.measure(target.url, ceiling_s) if ceiling_s > 0 else None  # same host, same database
    if ceiling is not None:
        print(limits.ceiling_line({"backend": target.label, **ceiling}), file=sys.stderr, flush=True)
    result = _measure(target, count, node_count, mode, idempotent, lead_s, senders, receiver_ms)
    if ceiling is not None:
        result["ceiling"] = ceiling
        result["ceiling_share"] = limits.share(result["deliveries_per_s"], ceiling["one_tx_per_s"])
    return result


def _measure(target: Target, count: int, node_count: int, mode: str, idempotent: bool, lead_s: float,
             senders: int, receiver_ms: int) -> dict[str, Any]:
    engine = prepare(target.url)
    receiver = Receiver(answer_after_ms=receiver_ms)
    try:
        window_end = next_boundary(engine, 0) + 180 * MINUTE_MS  # any boundary: the offset puts us there
        config = reach_config(receiver.url, window_end, idempotent, senders)
        enqueue_s = enqueue(engine, config, count, offset_for(engine, window_end - 60 * MINUTE_MS, 0))
        offset = offset_for(engine, window_end, lead_s)
        options = {"url": target.url, "reach": config, "reach_mode": mode, "tick_ms": 1000}
        procs = [spawn("_node.py", [json.dumps({**options, "node_id": f"reach-{i}"})], f"reach-{i}",
                       {"HAI_TEST_DB_CLOCK_OFFSET_MS": str(offset)}) for i in range(node_count)]
        try:
            minutes = math.ceil(count / (100 * node_count))  # even at 100 rows a minute per node
            wait_until(lambda: _statuses(engine, TERMINAL) >= count, lead_s + 60 * (minutes + 3),
                       "every message to be settled", procs, poll_s=0.5)
            stats = stop_all(procs)
        finally:
            kill_all(procs)
        return summarise(engine, target.label, receiver, count, mode, enqueue_s, window_end - offset, stats)
    finally:
        receiver.close()
        close_engine(engine)


def _statuses(engine: Any, statuses: tuple[str, ...]) -> int:
    query = select(func.count()).select_from(reach_queue).where(reach_queue.c.status.in_(statuses))
    return scalar(engine, query)


def summarise(engine: Any, kind: str, receiver: Receiver, count: int, mode: str, enqueue_s: float, window_end_real: int,
              stats: list[dict[str, Any]]) -> dict[str, Any]:
    grouped = select(reach_queue.c.status, func.count().label("n")).group_by(reach_queue.c.status)
    by_status = {row.status: int(row.n) for row in fetch(engine, grouped)}
    tally = receiver.tally()
    dead_unknown = int(by_status.get("dead", 0)) + int(by_status.get("unknown", 0))
    span = (tally.last_at - tally.first_at) if tally.first_at is not None and tally.last_at is not None else None
    rounds = [r for s in stats for r in s["rounds"] if r["claimed"]]
    sent = int(by_status.get("sent", 0))
    sql = sql_per(stats, sent, kind)
    return {
        "mode": mode, "messages": count, "nodes": len(stats), "enqueue_per_s": round(count / enqueue_s, 1),
        "deliveries_per_s": round(tally.messages / span, 1) if span else None,
        "round_rate": round(sum(r["claimed"] for r in rounds) / max(1e-9, sum(r["seconds"] for r in rounds)), 1),
        "rounds": len(rounds),
        "first_after_s": _after(tally.first_at, window_end_real), "drained_after_s": _after(tally.last_at,
                                                                                          window_end_real),
        "sent": sent, "received": tally.messages, "requests": tally.requests,
        "raw_duplicates": tally.raw_duplicates, "effect_duplicates": tally.effect_duplicates,
        "lost": count - tally.messages - dead_unknown, "dead_unknown": dead_unknown, "statuses": by_status,
        "statements_per_delivery": sql["statements"], "transactions_per_delivery": sql["transactions"],
        "sql_commands_per_delivery": sql["sql_commands"],
        "cpu_s": [round(s["cpu_ms"] / 1000, 1) for s in stats],
    }


def _after(at: float | None, window_end_real: int) -> float | None:
    return None if at is None else round(at - window_end_real / 1000, 2)


def main() -> None:
    parser = base_parser(__doc__)
    add_common_args(parser)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--mode", choices=("tick", "loop"), default="tick",
                        help="tick: a round a minute (production); loop: rounds back to back")
    parser.add_argument("--no-idempotent", dest="idempotent", action="store_false",
                        help="a webhook provider that does not promise idempotency (no Idempotency-Key)")
    parser.add_argument("--lead-s", type=float, default=10.0, help="seconds between node start and the window's end")
    parser.add_argument("--concurrency", type=int, default=4,
                        help="queue.concurrency: deliveries a node's round runs at once (1-32; product default 4)")
    parser.add_argument("--ceiling-s", type=float, default=0,
                        help="first measure this host's ceiling (bench/limits.py), this many seconds per operation, "
                             "and print deliveries / s as a share of its one-transaction rate; 0 (default) skips it")
    parser.add_argument("--receiver-ms", type=int, default=0,
                        help="the receiver answers each request after this many ms (a real provider's latency)")
    args = parser.parse_args()
    rows = run_on_targets(args, parser, "notify", lambda target: measure(
        target, args.messages, args.nodes, args.mode, args.idempotent, args.lead_s, args.concurrency,
        args.receiver_ms, args.ceiling_s))
    kind = "idempotent" if args.idempotent else "non-idempotent"
    title = (f"Notification queue: {args.messages:,} messages released at the end of a "
             f"do-not-disturb window, {args.nodes} nodes, {kind} webhook, rounds: {args.mode}, "
             f"{args.concurrency} senders per node, receiver answers after {args.receiver_ms} ms")
    finish(COLUMNS, rows, title, args.json)


if __name__ == "__main__":
    main()
