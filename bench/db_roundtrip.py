"""Round-trip cost of the DB clock and of a BEGIN IMMEDIATE write on each database.

Prints a table; it asserts nothing (these machines are noisy). Example:

    .venv/bin/python bench/db_roundtrip.py --url sqlite:///bench.db \
        --url postgresql://postgres@127.0.0.1:5432/test --url mysql://root@127.0.0.1:3306/test
"""

from __future__ import annotations

import argparse
import statistics
import time

from sqlalchemy import select, text

from scheduler_core.db import close_engine, create_engine, db_now_ms


def _measure(url: str, rounds: int) -> dict[str, float]:
    engine = create_engine(url)
    try:
        reads, writes = [], []
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE IF NOT EXISTS bench_rt (id INTEGER PRIMARY KEY, v BIGINT)"))
            conn.execute(text("DELETE FROM bench_rt"))
            conn.execute(text("INSERT INTO bench_rt (id, v) VALUES (1, 0)"))
        for _ in range(rounds):
            started = time.perf_counter()
            with engine.connect() as conn:
                conn.execute(select(db_now_ms())).scalar_one()
                conn.rollback()
            reads.append(time.perf_counter() - started)
            started = time.perf_counter()
            with engine.begin() as conn:
                conn.execute(text("UPDATE bench_rt SET v = v + 1 WHERE id = 1"))
            writes.append(time.perf_counter() - started)
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE bench_rt"))
    finally:
        close_engine(engine)
    return {
        "clock_p50_ms": statistics.median(reads) * 1000,
        "clock_p99_ms": statistics.quantiles(reads, n=100)[98] * 1000,
        "write_p50_ms": statistics.median(writes) * 1000,
        "write_p99_ms": statistics.quantiles(writes, n=100)[98] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", action="append", required=True, help="database URL (repeatable)")
    parser.add_argument("--rounds", type=int, default=500)
    args = parser.parse_args()
    print(f"{'database':<12} {'clock p50':>10} {'clock p99':>10} {'write p50':>10} {'write p99':>10}  (ms)")
    for url in args.url:
        figures = _measure(url, args.rounds)
        print(f"{url.split(':')[0]:<12} {figures['clock_p50_ms']:>10.3f} {figures['clock_p99_ms']:>10.3f} "
              f"{figures['write_p50_ms']:>10.3f} {figures['write_p99_ms']:>10.3f}")


if __name__ == "__main__":
    main()
