"""Print the database clock and this process's clock as JSON (run under libfaketime by tests)."""

from __future__ import annotations

import json
import sys
import time

from sqlalchemy import select

from scheduler_core.db import close_engine, create_engine, db_now_ms, to_ms


def main(url: str) -> None:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            db_ms = to_ms(conn.execute(select(db_now_ms())).scalar_one(), "db_now_ms")
            local_ms = int(time.time() * 1000)
            conn.rollback()
    finally:
        close_engine(engine)
    print(json.dumps({"db_ms": db_ms, "local_ms": local_ms}))


if __name__ == "__main__":
    main(sys.argv[1])
