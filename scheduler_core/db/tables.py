"""The schema as SQLAlchemy Core tables, which the migration test compares the migrated database
against (migrations create it). Timestamps are BIGINT unix ms from the DB clock, payloads JSON,
MySQL text a binary NO PAD collation (migration 0006), and the invariants live in the schema."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.dialects.postgresql import JSONB

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING_CONVENTION)

MYSQL_TABLE_OPTIONS: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
}


def nopad_collation(dialect: Any) -> str:
    """The binary NO PAD collation of a MySQL server: ids compare byte for byte (migration 0006)."""
    return "utf8mb4_nopad_bin" if getattr(dialect, "is_mariadb", False) else "utf8mb4_0900_bin"

ID_LENGTH = 128  # task ids, node ids, idempotency keys, sources
OCCURRENCE_ID_LENGTH = 64
TOKEN_LENGTH = 64

Json = JSON().with_variant(JSONB(), "postgresql")


def ms_column(name: str, nullable: bool = False) -> Column[int]:
    return Column(name, BigInteger, nullable=nullable)


tasks = Table(
    "tasks",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("name", String(255), nullable=False),
    Column("description", Text, nullable=True),
    Column("cron", String(255), nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("delete_after_run", Boolean, nullable=False),
    Column("idempotent", Boolean, nullable=False),
    Column("retry", Json, nullable=True),
    Column("handler", Json, nullable=True),
    Column("params", Json, nullable=True),
    Column("revision", BigInteger, nullable=False),
    ms_column("created_at"),
    ms_column("updated_at"),
    Column("node_group", String(64), nullable=True),  # runs only on nodes in this group
    Column("catchup", Json, nullable=True),  # {"policy": none | latest | all, "window_ms": N}
    ms_column("paused_at", nullable=True),  # paused: no cron occurrences until resumed (or paused_until)
    ms_column("paused_until", nullable=True),
    Column("paused_by", String(ID_LENGTH), nullable=True),
    Column("paused_reason", Text, nullable=True),
    Column("managed_by", String(ID_LENGTH), nullable=True),  # the task file that created it (migration 0011)
    Column("runbook_url", String(2048), nullable=True),  # an http(s) link for operators (migration 0015)
    Column("owner", String(255), nullable=True),  # whom operators contact about its runs (migration 0017)
    Column("calendar", Json, nullable=True),  # active window and exclusions (migration 0018)
    Column("overlap", Json, nullable=True),  # overlap policy (migration 0019)
    Column("pause_on_failure", Integer, nullable=True),  # failures in a row that pause it (migration 0020)
    Column("max_runs", Integer, nullable=True),  # scheduled runs after which it disables itself (migration 0021)
    Column("runs_counted", Integer, nullable=False, server_default="0"),  # started since (re-)enabled
    ms_column("limit_reached_at", nullable=True),  # it disabled itself on reaching max_runs (DB clock)
    Column("jitter_ms", Integer, nullable=True),  # each scheduled occurrence's start delayed up to this (0022)
    Column("team", String(64), nullable=False, server_default="default"),  # the team it belongs to (0025)
    Index(None, "updated_at"),
    Index(None, "paused_at", "id"),  # the task.paused alert's scan (migration 0020)
    Index(None, "managed_by"),  # tasks apply --prune
    Index(None, "enabled", "id"),
    Index(None, "team", "id"),  # a team's tasks by id (migration 0025)
    **MYSQL_TABLE_OPTIONS,
)

# One row per task: the task's single active slot. Cron occurrences, manual triggers and
# later periods all compete for it; an unknown execution keeps it until resolved.
slots = Table(
    "slots",
    metadata,
    Column("task_id", String(ID_LENGTH), primary_key=True),
    Column("occurrence_id", String(OCCURRENCE_ID_LENGTH), nullable=True),
    Column("execution_token", String(TOKEN_LENGTH), nullable=True),
    ms_column("updated_at"),
    Index(None, "occurrence_id"),
    **MYSQL_TABLE_OPTIONS,
)

# The journal: one row per occurrence, whatever became of it.
executions = Table(
    "executions",
    metadata,
    Column("occurrence_id", String(OCCURRENCE_ID_LENGTH), primary_key=True),
    Column("task_id", String(ID_LENGTH), nullable=False),
    Column("task_revision", BigInteger, nullable=False),
    Column("trigger", String(16), nullable=False),  # cron | manual | catchup | backfill
    Column("source", String(ID_LENGTH), nullable=True),
    Column("idempotency_key", String(ID_LENGTH), nullable=True),
    ms_column("scheduled_minute", nullable=True),  # UTC minute start of a cron occurrence
    Column("status", String(16), nullable=False),
    Column("reason", String(64), nullable=True),  # e.g. slot_busy, lease_lost, deleted
    Column("sequence", Integer, nullable=False),  # ownership generation: 1, +1 per takeover
    Column("attempt", Integer, nullable=False),  # attempts used of the budget
    Column("max_attempts", Integer, nullable=False),  # the stored budget
    Column("execution_token", String(TOKEN_LENGTH), nullable=True),
    Column("owner_node", String(ID_LENGTH), nullable=True),
    ms_column("lease_until", nullable=True),
    ms_column("next_attempt_at", nullable=True),
    Column("attempts", Json, nullable=False),  # every attempt with its stable log UUID
    Column("log_persistence", String(16), nullable=True),  # persisted | pending | unconfirmed
    Column("resolved_by", String(ID_LENGTH), nullable=True),
    Column("resolution_reason", Text, nullable=True),
    ms_column("created_at"),
    ms_column("updated_at"),
    ms_column("missed_until", nullable=True),  # a summary missed row: its minutes run through this one
    Column("missed_count", Integer, nullable=True),  # ... and there are this many of them
    UniqueConstraint("task_id", "idempotency_key"),
    Index(None, "status", "lease_until"),  # expiry scan
    Index(None, "status", "updated_at"),  # unknown review
    # Keyset pages, newest first by (created_at, occurrence_id), per filter (migration 0005):
    Index(None, "created_at", "occurrence_id"),  # the journal list, time windows
    Index(None, "status", "created_at", "occurrence_id"),  # status filter, counts, overview chart
    Index(None, "task_id", "created_at", "occurrence_id"),  # task filter, task detail history
    Index(None, "log_persistence", "updated_at", "occurrence_id"),  # log failures in repair order
    Index(None, "owner_node", "status"),  # leases per node
    Column("team", String(64), nullable=True),  # NULL: its task's team; written on a move or delete (0025)
    **MYSQL_TABLE_OPTIONS,
)

# One row per attempt, keyed by the attempt's stable UUID; observational and prunable.
logs = Table(
    "logs",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("occurrence_id", String(OCCURRENCE_ID_LENGTH), nullable=False),
    Column("task_id", String(ID_LENGTH), nullable=False),
    Column("trigger", String(16), nullable=False),
    Column("source", String(ID_LENGTH), nullable=True),
    Column("status", String(16), nullable=False),
    Column("sequence", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("node_id", String(ID_LENGTH), nullable=True),
    ms_column("started_at"),
    ms_column("finished_at", nullable=True),
    Column("duration_ms", BigInteger, nullable=True),
    Column("error", Text, nullable=True),
    Column("result", Json, nullable=True),
    ms_column("created_at"),
    Index(None, "started_at", "id"),  # keyset pagination, retention
    # Keyset pages per filter, newest first by (started_at, id) (migration 0005):
    Index(None, "task_id", "started_at", "id"),
    Index(None, "status", "started_at", "id"),
    Index(None, "source", "started_at", "id"),
    Index(None, "occurrence_id"),
    Column("team", String(64), nullable=True),  # NULL: its task's team; written on a move or delete (0025)
    **MYSQL_TABLE_OPTIONS,
)

# Node heartbeats, for the dashboard only: liveness never decides ownership (leases do).
nodes = Table(
    "nodes",
    metadata,
    Column("node_id", String(ID_LENGTH), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    ms_column("started_at"),
    ms_column("last_seen_at"),
    ms_column("stopped_at", nullable=True),
    Column("capabilities", Json, nullable=True),  # handler kinds it runs: api, python, hook, js
    Column("node_groups", Json, nullable=True),  # groups it belongs to
    Column("clock_jump_ms", BigInteger, nullable=True),  # the last database clock jump it saw, +ahead (0016)
    Column("clock_jump_at", BigInteger, nullable=True),  # DB-clock ms when it saw it
    Column("last_tick_ms", BigInteger, nullable=True),  # its previous tick's duration, node clock (0011)
    Index(None, "last_seen_at"),
    **MYSQL_TABLE_OPTIONS,
)

# Small named counters. ``tasks_version`` is bumped in the same transaction as every task
# change, so a node detects any change (including delete + insert) with one cheap read.
scheduler_meta = Table(
    "scheduler_meta",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", BigInteger, nullable=False),
    **MYSQL_TABLE_OPTIONS,
)

# Monotonic totals behind the /metrics counters (migration 0013): ``value`` only grows, added to in
# the transaction that makes the transition it counts (store/totals.py); nothing deletes a row.
metric_totals = Table(
    "metric_totals",
    metadata,
    Column("metric", String(32), primary_key=True),  # executions, takeovers, missed, deliveries, lateness, task
    Column("scope", String(ID_LENGTH), primary_key=True),  # the task id (deliveries: the provider)
    Column("label", String(64), primary_key=True),  # status, outcome, lateness bucket bound, or ""
    # the team its task was in when counted ("": deliveries, lock rows, a task gone; migration 0028)
    Column("team", String(64), primary_key=True, server_default=""),
    Column("value", BigInteger, nullable=False),
    ms_column("created_at"),  # first written: the stable order that picks the tasks with their own series
    **MYSQL_TABLE_OPTIONS,
)

# --- notifications (reach) -------------------------------------------------------------

# Templates stored in the database (templates from configuration live in memory).
reach_templates = Table(
    "reach_templates",
    metadata,
    Column("name", String(ID_LENGTH), primary_key=True),
    Column("provider", String(64), nullable=False),
    Column("subject", Text, nullable=True),
    Column("body", Text, nullable=False),
    ms_column("created_at"),
    ms_column("updated_at"),
    **MYSQL_TABLE_OPTIONS,
)

# The durable delivery queue: one row per deferred message, with its own retry policy.
# status: pending -> processing -> sending -> sent | unknown | dead | discarded.
reach_queue = Table(
    "reach_queue",
    metadata,
    Column("queue_id", String(36), primary_key=True),
    Column("provider", String(64), nullable=False),
    Column("template", String(ID_LENGTH), nullable=True),
    Column("recipient", Text, nullable=False),  # never returned by the operator API
    Column("subject", Text, nullable=True),
    Column("body", Text, nullable=False),
    Column("extra", Json, nullable=True),
    Column("status", String(16), nullable=False),
    Column("attempt_count", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("retry_delay_ms", BigInteger, nullable=False),
    Column("max_retry_delay_ms", BigInteger, nullable=False),
    ms_column("next_attempt_at"),
    Column("locked_by", String(ID_LENGTH), nullable=True),
    Column("lock_token", String(64), nullable=True),
    ms_column("locked_until", nullable=True),
    Column("last_failure", String(32), nullable=True),  # the failure class (attempts_exhausted when used up)
    Column("last_error", Text, nullable=True),  # what went wrong last: class and a short masked message (0012)
    Column("message_id", String(255), nullable=True),
    Column("resolved_by", String(ID_LENGTH), nullable=True),
    ms_column("created_at"),
    ms_column("updated_at"),
    Column("urgent", Boolean, nullable=False, server_default=false()),  # delivered during do-not-disturb too
    Column("alert_rule", String(ID_LENGTH), nullable=True),  # an alert: the rule that raised it
    Column("team", String(64), nullable=True),  # an alert about a team's task: that team; NULL: every team's (0027)
    Index(None, "status", "next_attempt_at"),  # rounds: due pending rows
    Index(None, "status", "locked_until"),  # expired leases
    Index(None, "status", "updated_at", "queue_id"),  # dead / unknown lists (keyset pages)
    Index(None, "alert_rule", "created_at"),  # the alerts list
    Index(None, "team", "status", "updated_at", "queue_id"),  # a team's lists (migration 0027)
    **MYSQL_TABLE_OPTIONS,
)

# --- alerts ----------------------------------------------------------------------------

# Rules stored from the dashboard (rules from the configuration live in memory).
alert_rules = Table(
    "alert_rules",
    metadata,
    Column("name", String(ID_LENGTH), primary_key=True),
    Column("definition", Json, nullable=False),
    Column("team", String(64), nullable=True),  # the team whose tasks it covers; NULL: a global rule (0027)
    ms_column("created_at"),
    ms_column("updated_at"),
    **MYSQL_TABLE_OPTIONS,
)

# One row per (rule, fact): a fact alerts once, whatever nodes or crashes see it again.
alert_facts = Table(
    "alert_facts",
    metadata,
    Column("rule", String(ID_LENGTH), primary_key=True),
    Column("event_key", String(255), primary_key=True),
    Column("event", String(32), nullable=False),
    Column("scope", String(ID_LENGTH), nullable=False),  # the task (or the event) a throttle counts per
    Column("queue_id", String(36), nullable=True),  # the alert it went out with; None: folded
    Column("folded", Boolean, nullable=False),
    ms_column("created_at"),
    Index(None, "created_at"),
    **MYSQL_TABLE_OPTIONS,
)

# Per rule and scope: when the last alert went out, and how many facts were folded since.
alert_throttles = Table(
    "alert_throttles",
    metadata,
    Column("rule", String(ID_LENGTH), primary_key=True),
    Column("scope", String(ID_LENGTH), primary_key=True),
    ms_column("last_sent_at"),
    Column("folded", Integer, nullable=False),
    **MYSQL_TABLE_OPTIONS,
)

# --- dashboard (users, teams, sessions and API tokens: account_tables.py) -----------------

# Every operator action: who, when, what, before / after, why.
audit_log = Table(
    "audit_log",
    metadata,
    Column("id", String(36), primary_key=True),
    ms_column("at"),
    Column("actor", String(64), nullable=False),
    Column("action", String(64), nullable=False),
    Column("target", String(255), nullable=True),
    Column("before", Json, nullable=True),
    Column("after", Json, nullable=True),
    Column("reason", Text, nullable=True),
    Column("team", String(64), nullable=True),  # the team it is about; NULL: no one team's (0026)
    Index(None, "at", "id"),
    Index(None, "actor", "at"),
    Index(None, "action", "at"),
    Index(None, "team", "at", "id"),
    **MYSQL_TABLE_OPTIONS,
)


