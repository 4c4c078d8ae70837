"""Hammer one SQLite file with conditional updates for a while; print a JSON report.

Each round, in one transaction: read the counter, compare-and-set it to value + 1, and
journal the value taken. With BEGIN IMMEDIATE, no round may fail or lose its CAS.
"""

from __future__ import annotations

import json
import sys
import time

from sqlalchemy import text

from scheduler_core.db import close_engine, create_engine


def main(url: str, worker: str, seconds: float, start_at: float) -> None:
    engine = create_engine({"url": url, "pool_size": 2})
    rounds = lost = 0
    errors: list[str] = []
    time.sleep(max(0.0, start_at - time.time()))  # imports and engine done: both workers start together
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            try:
                with engine.begin() as conn:
                    value = conn.execute(text("SELECT value FROM counter WHERE id = 1")).scalar_one()
                    changed = conn.execute(
                        text("UPDATE counter SET value = :new WHERE id = 1 AND value = :old"),
                        {"new": value + 1, "old": value},
                    ).rowcount
                    if changed != 1:
                        lost += 1
                        continue
                    conn.execute(
                        text("INSERT INTO taken (value, worker) VALUES (:v, :w)"), {"v": value + 1, "w": worker}
                    )
                rounds += 1
            except Exception as exc:  # every error is a failure of the test
                errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        close_engine(engine)
    print(
        json.dumps({"worker": worker, "rounds": rounds, "lost": lost, "errors": errors[:5], "error_count": len(errors)})
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
