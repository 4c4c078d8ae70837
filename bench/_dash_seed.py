"""Seed a PostgreSQL database for dashboard.py: T tasks, J journal rows, the matching log rows,
notification queue rows and audit entries, consistent with scheduler_core/db/tables.py.

Tasks go through the repository (validated definitions, a slot each, the tasks version);
the bulk goes in with ``INSERT ... SELECT ... FROM generate_series`` inside PostgreSQL.

The journal: J / T executions per task, one an hour back from now. Per task, by its index k
(0 = newest): k = 7 skipped (slot_busy, no attempt); k = 13 two attempts (failed, then
success); k % 17 = 5 failed; k % 31 = 11 interrupted; k % 10 = 9 a manual trigger from the
dashboard; the newest of every 50th task unknown (and holding the task's slot, as the
engine leaves it); the newest of every 100th+3 task ``log_persistence = pending`` (no log rows
yet, with a second two-attempt run at k = 14 to keep the count); k = 50 of every 100th+1
task discarded by an operator. Logs are the journal's attempts, projected as the engine
projects them: exactly one log row per attempt of every ``persisted`` execution -- J rows
in all. Cron occurrence ids are the engine's own (uuid5 of task and minute, via pgcrypto).

Every task's cron fires only on 1 January (``m h 1 1 *``), so the dashboard's own nodes have
nothing to run while they are measured.
"""

from __future__ import annotations

from _common import db_now, register_tasks
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from scheduler_core.cron import OCCURRENCE_NAMESPACE
from scheduler_core.model import TaskDefinition
from scheduler_core.task_policies import RetryPolicy

ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo")
HOUR_MS = 3_600_000

UUID5 = f"""
CREATE FUNCTION pg_temp.cron_occurrence_id(task_id text, minute bigint) RETURNS text AS $$
  SELECT encode(set_byte(set_byte(b, 6, (get_byte(b, 6) & 15) | 80), 8, (get_byte(b, 8) & 63) | 128),
                'hex')::uuid::text
  FROM (SELECT substring(digest(decode('{OCCURRENCE_NAMESPACE.hex}', 'hex') || convert_to('cron', 'UTF8')
        || '\\x00'::bytea || convert_to(task_id, 'UTF8') || '\\x00'::bytea || convert_to(minute::text, 'UTF8'),
        'sha1') FROM 1 FOR 16) AS b) AS s
$$ LANGUAGE sql IMMUTABLE
"""

# One row per (task t, index k): the columns every later statement derives from.
EXECUTIONS = """
INSERT INTO executions (occurrence_id, task_id, task_revision, trigger, source, idempotency_key, scheduled_minute,
    status, reason, sequence, attempt, max_attempts, execution_token, owner_node, lease_until, next_attempt_at,
    attempts, log_persistence, resolved_by, resolution_reason, created_at, updated_at)
SELECT CASE WHEN manual THEN gen_random_uuid()::text ELSE pg_temp.cron_occurrence_id(task_id, minute) END,
    task_id, 1, CASE WHEN manual THEN 'manual' ELSE 'cron' END, CASE WHEN manual THEN 'dashboard' END, NULL,
    CASE WHEN manual THEN NULL ELSE minute END, status,
    CASE status WHEN 'skipped' THEN 'slot_busy' WHEN 'interrupted' THEN 'deleted' WHEN 'unknown' THEN 'lease_expired'
    END,
    1, CASE WHEN status = 'skipped' THEN 0 WHEN two THEN 2 ELSE 1 END, CASE WHEN t % 3 = 0 THEN 3 ELSE 1 END,
    gen_random_uuid()::text, node, NULL, NULL,
    CASE WHEN status = 'skipped' THEN '[]'::jsonb
         WHEN two THEN jsonb_build_array(
            jsonb_build_object('log_id', gen_random_uuid()::text, 'attempt', 1, 'sequence', 1, 'node_id', node,
                'started_at', at + 40, 'finished_at', at + 140, 'status', 'failed',
                'error', 'HTTP 503 Service Unavailable', 'result', NULL),
            jsonb_build_object('log_id', gen_random_uuid()::text, 'attempt', 2, 'sequence', 1, 'node_id', node,
                'started_at', at + 1140, 'finished_at', at + 1300, 'status', 'success', 'error', NULL,
                'result', jsonb_build_object('status', 200)))
         ELSE jsonb_build_array(jsonb_build_object('log_id', gen_random_uuid()::text, 'attempt', 1, 'sequence', 1,
                'node_id', node, 'started_at', at + 40, 'finished_at', at + 140 + (k * 7) % 900, 'status', status,
                'error', CASE status WHEN 'failed' THEN 'HTTP 500 Internal Server Error'
                                     WHEN 'interrupted' THEN 'the task was deleted'
                                     WHEN 'unknown' THEN 'owner lost its lease before reporting' END,
                'result', CASE WHEN status = 'success' THEN jsonb_build_object('status', 200, 'rows', k) END))
    END,
    CASE WHEN status = 'skipped' THEN NULL WHEN pending THEN 'pending' ELSE 'persisted' END,
    CASE WHEN status = 'discarded' THEN 'admin' END, CASE WHEN status = 'discarded' THEN 'checked by hand' END,
    at, at + 1400
FROM (
    SELECT t, k, task_id, node, at, at - at % 60000 AS minute, manual, two, pending,
        CASE WHEN k = 7 THEN 'skipped'
             WHEN two OR pending THEN 'success'
             WHEN k = 0 AND t % 50 = 0 THEN 'unknown'
             WHEN k = 50 AND t % 100 = 1 THEN 'discarded'
             WHEN k % 17 = 5 THEN 'failed'
             WHEN k % 31 = 11 THEN 'interrupted'
             ELSE 'success' END AS status
    FROM (
        SELECT t, k, 'dash-' || lpad(t::text, 5, '0') AS task_id, 'web-' || (t % 2) AS node,
            {now} - k * {hour} - (t % 3600) * 1000 AS at, k % 10 = 9 AS manual,
            k = 13 OR (k = 14 AND t % 100 = 3) AS two, k = 0 AND t % 100 = 3 AS pending
        FROM generate_series(0, {tasks} - 1) AS t, generate_series(0, {per_task} - 1) AS k
    ) AS base
) AS shaped
"""

LOGS = """
INSERT INTO logs (id, occurrence_id, task_id, trigger, source, status, sequence, attempt, node_id, started_at,
    finished_at, duration_ms, error, result, created_at)
SELECT a->>'log_id', e.occurrence_id, e.task_id, e.trigger, e.source, a->>'status', (a->>'sequence')::int,
    (a->>'attempt')::int, a->>'node_id', (a->>'started_at')::bigint, (a->>'finished_at')::bigint,
    (a->>'finished_at')::bigint - (a->>'started_at')::bigint, a->>'error', a->'result', e.updated_at
FROM executions AS e, jsonb_array_elements(e.attempts) AS a
WHERE e.log_persistence = 'persisted'
"""

UNKNOWN_SLOTS = """
UPDATE slots SET occurrence_id = e.occurrence_id, execution_token = e.execution_token, updated_at = e.updated_at
FROM executions AS e WHERE e.status = 'unknown' AND slots.task_id = e.task_id
"""

QUEUE = """
INSERT INTO reach_queue (queue_id, provider, template, recipient, subject, body, extra, status, attempt_count,
    max_attempts, retry_delay_ms, max_retry_delay_ms, next_attempt_at, locked_by, lock_token, locked_until,
    last_failure, message_id, resolved_by, created_at, updated_at)
SELECT gen_random_uuid()::text, 'hook', NULL, 'user-' || i, NULL, 'message ' || i, '{{}}'::jsonb, status,
    CASE status WHEN 'dead' THEN 5 ELSE 1 END, 5, 60000, 3600000, at, NULL, NULL, NULL,
    CASE status WHEN 'dead' THEN 'attempts_exhausted' WHEN 'unknown' THEN 'transient_failure' END,
    CASE WHEN status = 'sent' THEN 'm-' || i END, NULL, at, at + 500
FROM (SELECT i, {now} - i * 60000 AS at,
             CASE WHEN i % 100 = 1 THEN 'dead' WHEN i % 100 = 2 THEN 'unknown' ELSE 'sent' END AS status
      FROM generate_series(0, {count} - 1) AS i) AS q
"""

AUDIT = """
INSERT INTO audit_log (id, at, actor, action, target, before, after, reason)
SELECT gen_random_uuid()::text, {now} - i * 60000, CASE WHEN i % 3 = 0 THEN 'admin' ELSE 'operator-' || (i % 5) END,
    (ARRAY['task.update', 'task.trigger', 'execution.resolve_unknown', 'queue.requeue_dead'])[1 + i % 4],
    'dash-' || lpad((i % {tasks})::text, 5, '0'), '{{"enabled": true}}'::jsonb, '{{"enabled": false}}'::jsonb,
    CASE WHEN i % 4 = 2 THEN 'checked with the team' END
FROM generate_series(0, {count} - 1) AS i
"""


def dash_tasks(count: int) -> list[TaskDefinition]:
    """API and hook tasks in four zones, some idempotent with retries, every 20th disabled."""
    found = []
    for t in range(count):
        handler = ({"kind": "api", "url": f"http://127.0.0.1:9/hooks/{t}", "method": "POST"} if t % 2 == 0
                   else {"kind": "hook"})
        found.append(TaskDefinition(
            id=f"dash-{t:05d}", name=f"Report {t} for team {t % 37}", cron=f"{t % 60} {t // 60 % 24} 1 1 *",
            timezone=ZONES[t % 4], enabled=t % 20 != 0, idempotent=t % 3 == 0,
            retry=RetryPolicy(max_attempts=3, backoff_ms=(1000, 5000)) if t % 3 == 0 else None, handler=handler,
            description=f"Nightly figures of team {t % 37}" if t % 10 == 0 else None))
    return found


def seed(engine: Engine, tasks: int, journal: int, queue: int = 10_000, audit: int = 10_000) -> dict[str, int]:
    """Fill an empty, migrated database; returns the row counts."""
    per_task = journal // tasks
    register_tasks(engine, dash_tasks(tasks), batch=1000)
    now = db_now(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pgcrypto")
        conn.execute(text(UUID5))
        conn.execute(text(EXECUTIONS.format(now=now, hour=HOUR_MS, tasks=tasks, per_task=per_task)))
        conn.execute(text(LOGS))
        conn.execute(text(UNKNOWN_SLOTS))
        conn.execute(text(QUEUE.format(now=now, count=queue)))
        conn.execute(text(AUDIT.format(now=now, count=audit, tasks=tasks)))
        conn.exec_driver_sql("DROP FUNCTION pg_temp.cron_occurrence_id(text, bigint)")
        conn.exec_driver_sql("DROP EXTENSION pgcrypto")
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")
    return counts(engine)


def counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {name: _count(conn, name) for name in ("tasks", "executions", "logs", "reach_queue", "audit_log")}


def _count(conn: Connection, table: str) -> int:
    return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
