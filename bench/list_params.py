"""How PostgreSQL reads a batch's id list: bound as ``text[]``, or converted from text in the statement.

The claim's first read (``ExecutionRepository._journaled``) and the owner's row locks compare
``occurrence_id`` with a list of ids. Until commit 0e9e1f8 the list was written
``= ANY(CAST($1::VARCHAR AS TEXT[]))``: a conversion the planner does not fold, so where it
chose a sequential scan (a small journal) the whole list was parsed again for every row it
compared. Now it is ``= ANY($1::TEXT[])``: parsed once, when the statement is bound, and a
constant the planner can hash or use in an index condition.

For each journal size (synthetic finished rows generated in SQL, then ANALYZE) this reads
``--ids`` existing ids both ways, ``--samples`` times each on one connection, as the driver
path does (psycopg, no server-side prepare), and prints the median and p95 milliseconds and
the plan's first line.

    .venv/bin/python bench/list_params.py --backend postgresql
    .venv/bin/python bench/list_params.py --url postgresql://postgres@127.0.0.1:5432/scratch --reset --sizes 1000,50000
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import limits
from _common import (
    Target,
    add_common_args,
    base_parser,
    percentile,
    prepare,
    print_table,
    report_failures,
    run_on_targets,
)
from sqlalchemy import text
from sqlalchemy.engine import Engine

from scheduler_core.db import close_engine, dialect_kind

FORMS = {
    "converted": "SELECT occurrence_id FROM executions WHERE occurrence_id = ANY(CAST(%(ids)s::VARCHAR AS TEXT[]))",
    "bound": "SELECT occurrence_id FROM executions WHERE occurrence_id = ANY(%(ids)s::TEXT[])",
}
COLUMNS = [("rows", "journal rows"), ("ids", "ids"), ("converted_p50", "converted p50 ms"),
           ("converted_p95", "p95 ms"), ("converted_plan", "plan"), ("bound_p50", "bound p50 ms"),
           ("bound_p95", "p95 ms"), ("bound_plan", "plan"), ("ratio", "converted / bound (p50)")]


def grow(engine: Engine, start: int, end: int) -> None:
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO executions (occurrence_id, task_id, task_revision, \"trigger\", status, sequence, attempt, "
            "max_attempts, attempts, log_persistence, created_at, updated_at, scheduled_minute) "
            "SELECT md5(n::text)::uuid::text, 'task-' || (n % 1000), 1, 'cron', 'success', 1, 1, 1, '[]'::jsonb, "
            "'persisted', n * 1000, n * 1000, n * 60000 "
            "FROM generate_series(CAST(:low AS bigint), CAST(:high AS bigint)) AS g(n)"),
            {"low": start, "high": end - 1})
        conn.execute(text("ANALYZE executions"))


def measure_size(engine: Engine, rows: int, ids: int, samples: int) -> dict[str, Any]:
    result: dict[str, Any] = {"rows": rows, "ids": ids}
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("SELECT occurrence_id FROM executions ORDER BY random() LIMIT %(n)s", {"n": ids})
        wanted = [row[0] for row in cursor.fetchall()]
        literal = "{" + ",".join(f'"{i}"' for i in wanted) + "}"
        for name, sql in FORMS.items():
            cursor.execute("EXPLAIN " + sql, {"ids": literal})
            plan = cursor.fetchall()[0][0]
            took = []
            for _ in range(samples):
                began = time.perf_counter()
                cursor.execute(sql, {"ids": literal})
                found = cursor.fetchall()
                took.append((time.perf_counter() - began) * 1000)
            assert len(found) == len(wanted), f"{name}: {len(found)} of {len(wanted)} rows"
            result[f"{name}_p50"] = round(statistics.median(took), 2)
            result[f"{name}_p95"] = round(percentile(took, 0.95) or 0.0, 2)
            result[f"{name}_plan"] = plan.split("  (")[0].strip()
        raw.rollback()
    finally:
        raw.close()
    result["ratio"] = round(result["converted_p50"] / max(result["bound_p50"], 0.001), 1)
    return result


def measure(target: Target, sizes: list[int], ids: int, samples: int) -> list[dict[str, Any]]:
    engine = prepare(target.url)
    try:
        if dialect_kind(engine) != "postgresql":
            raise SystemExit("list_params.py measures PostgreSQL (the other databases get an expanding IN)")
        rows, done = [], 0
        for size in sorted(sizes):
            grow(engine, done, size)
            done = size
            rows.append(measure_size(engine, size, ids, samples))
        return rows
    finally:
        close_engine(engine)


def main() -> None:
    parser = base_parser(__doc__)
    add_common_args(parser)
    parser.add_argument("--sizes", default="1000,2000,5000,10000,50000,200000",
                        help="journal sizes to measure at, comma-separated (rows)")
    parser.add_argument("--ids", type=int, default=200, help="ids in the list (a claim batch is up to 200)")
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    sizes = [int(part) for part in args.sizes.split(",") if part.strip()]
    if not sizes or min(sizes) < args.ids:
        parser.error(f"--sizes: every size must hold the {args.ids} ids read")
    facts = limits.machine()
    outcomes = run_on_targets(args, parser, "list_params",
                              lambda target: {"sizes": measure(target, sizes, args.ids, args.samples)})
    results = [{"backend": o["backend"], **row} for o in outcomes for row in o.get("sizes", [])]
    print_table([("backend", "database"), *COLUMNS], results,
                f"A list of {args.ids} ids read from the journal: converted in the statement vs bound as text[]")
    print(f"\n{limits.machine_line(facts)}")
    report_failures(outcomes)


if __name__ == "__main__":
    main()
