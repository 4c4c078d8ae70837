"""PostgreSQL reads a batch's id and token lists once per statement, as constants.

The hot batch statements (the claim's first read, the owner's row locks, the slot release,
the log projection's mark) compare a column with a list parameter: ``column = ANY($1::TEXT[])``.
The server must parse the list when it binds the statement, so that the planner sees a
constant array -- which it hashes, or uses as an index condition. Written as
``CAST($1::VARCHAR AS TEXT[])`` the list was a conversion the planner does not fold: on a
small journal, read with a sequential scan, PostgreSQL parsed the whole list again for every
row (the claim's first read of 200 ids over a 2,000-row journal took about 90 ms instead of
1 ms, and was the largest database cost of a 1,000-task minute). The plan says which it is:
a list converted at run time shows as ``('{...}'::cstring)::text[]``.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from scheduler_core.model import Attempt, Execution
from scheduler_core.runtime.recovery import claimed_execution
from scheduler_core.store.executions import BeginRequest, ClaimRequest, ExecutionRepository, FinishRequest

# A journal of a few minutes' work, where the converted list cost most (a sequential scan). The
# plan shows a conversion whichever scan the planner picks (index conditions included), so the
# check does not depend on the planner's choice.
JOURNAL = 2_000
BATCH = 200


def _requests(count: int, prefix: str) -> list[ClaimRequest]:
    return [ClaimRequest(occurrence_id=str(uuid.uuid4()), task_id=f"{prefix}-{i:05d}", task_revision=1,
                         trigger="cron", max_attempts=1, token=str(uuid.uuid4()), scheduled_minute=60_000)
            for i in range(count)]


def _claim_begin_finish(repo: ExecutionRepository, requests: list[ClaimRequest]) -> None:
    results = repo.claim(requests)
    assert {r.outcome for r in results} == {"claimed"}
    executions: list[Execution] = [claimed_execution(r, repo.node_id) for r in requests]
    attempts = {e.occurrence_id: (Attempt(log_id=str(uuid.uuid4()), attempt=1, sequence=1, node_id=repo.node_id,
                                          started_at=61_000),) for e in executions}
    begun = repo.begin_attempts([BeginRequest(e.occurrence_id, e.execution_token or "", attempts[e.occurrence_id])
                                 for e in executions])
    assert begun == {e.occurrence_id for e in executions}
    done = {e.occurrence_id: (Attempt(**{**attempts[e.occurrence_id][0].to_json(), "status": "success",
                                         "finished_at": 61_001}),) for e in executions}
    result = repo.finish_many([FinishRequest(e, e.execution_token or "", "success", None, done[e.occurrence_id],
                                             True) for e in executions])
    assert result.committed == {e.occurrence_id for e in executions}


def test_batch_lists_reach_the_planner_as_constants(pg: Engine) -> None:
    repo = ExecutionRepository(pg, "node-a", 60_000)
    for start in range(0, JOURNAL, 500):  # a journal of finished occurrences, as after a few minutes
        _claim_begin_finish(repo, _requests(500, f"old{start}"))
    with pg.connect() as conn:
        conn.exec_driver_sql("ANALYZE executions")
        conn.exec_driver_sql("ANALYZE slots")
        conn.commit()

    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, sql: str, params: Any, *_: Any) -> None:
        if "::TEXT[]" in sql.upper() or "AS TEXT[]" in sql.upper():
            seen.append((sql, params))

    event.listen(pg, "before_cursor_execute", capture)
    try:
        _claim_begin_finish(repo, _requests(BATCH, "new"))
    finally:
        event.remove(pg, "before_cursor_execute", capture)

    kinds = {sql.split(None, 1)[0].upper() for sql, _ in seen}
    assert kinds >= {"SELECT", "UPDATE"}, f"the batch statements with lists were not seen: {kinds}"
    assert len(seen) >= 4  # the claim's read, the begin's and the finish's locks, the slot release
    raw = pg.raw_connection()
    try:
        cursor = raw.cursor()
        for sql, params in seen:
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            converted = [line[:300] for line in plan.splitlines() if "::cstring" in line]
            assert not converted, f"a list is converted when compared, not read once: {sql[:200]} ... {converted}"
        raw.rollback()
    finally:
        raw.close()
