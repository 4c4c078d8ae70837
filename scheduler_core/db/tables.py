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


def _ms(name: str, nullable: bool = False) -> Column[int]:
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
    _ms("created_at"),
    _ms("updated_at"),
    Column("node_group", String(64), nullable=True),  # runs only on nodes in this group
    Column("catchup", Json, nullable=True),  # {"policy": none | latest | all, "window_ms": N}
    _ms("paused_at", nullable=True),  # paused: no cron occurrences until resumed (or paused_until)
    _ms("paused_until", nullable=True),
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
    _ms("limit_reached_at", nullable=True),  # it disabled itself on reaching max_runs (DB clock)
    Column("jitter_ms", Integer, nullable=True),  # each scheduled occurrence's start delayed up to this (0022)
    Index(None, "updated_at"),
    Index(None, "paused_at", "id"),  # the task.paused alert's scan (migration 0020)
    Index(None, "managed_by"),  # tasks apply --prune
    Index(None, "enabled", "id"),
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
    _ms("updated_at"),
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
    _ms("scheduled_minute", nullable=True),  # UTC minute start of a cron occurrence
    Column("status", String(16), nullable=False),
    Column("reason", String(64), nullable=True),  # e.g. slot_busy, lease_lost, deleted
    Column("sequence", Integer, nullable=False),  # ownership generation: 1, +1 per takeover
    Column("attempt", Integer, nullable=False),  # attempts used of the budget
    Column("max_attempts", Integer, nullable=False),  # the stored budget
    Column("execution_token", String(TOKEN_LENGTH), nullable=True),
    Column("owner_node", String(ID_LENGTH), nullable=True),
    _ms("lease_until", nullable=True),
    _ms("next_attempt_at", nullable=True),
    Column("attempts", Json, nullable=False),  # every attempt with its stable log UUID
    Column("log_persistence", String(16), nullable=True),  # persisted | pending | unconfirmed
    Column("resolved_by", String(ID_LENGTH), nullable=True),
    Column("resolution_reason", Text, nullable=True),
    _ms("created_at"),
    _ms("updated_at"),
    _ms("missed_until", nullable=True),  # a summary missed row: its minutes run through this one
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
    _ms("started_at"),
    _ms("finished_at", nullable=True),
    Column("duration_ms", BigInteger, nullable=True),
    Column("error", Text, nullable=True),
    Column("result", Json, nullable=True),
    _ms("created_at"),
    Index(None, "started_at", "id"),  # keyset pagination, retention
    # Keyset pages per filter, newest first by (started_at, id) (migration 0005):
    Index(None, "task_id", "started_at", "id"),
    Index(None, "status", "started_at", "id"),
    Index(None, "source", "started_at", "id"),
    Index(None, "occurrence_id"),
    **MYSQL_TABLE_OPTIONS,
)

# Node heartbeats, for the dashboard only: liveness never decides ownership (leases do).
nodes = Table(
    "nodes",
    metadata,
    Column("node_id", String(ID_LENGTH), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    _ms("started_at"),
    _ms("last_seen_at"),
    _ms("stopped_at", nullable=True),
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
    Column("value", BigInteger, nullable=False),
    _ms("created_at"),  # first written: the stable order that picks the tasks with their own series
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
    _ms("created_at"),
    _ms("updated_at"),
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
    _ms("next_attempt_at"),
    Column("locked_by", String(ID_LENGTH), nullable=True),
    Column("lock_token", String(64), nullable=True),
    _ms("locked_until", nullable=True),
    Column("last_failure", String(32), nullable=True),  # the failure class (attempts_exhausted when used up)
    Column("last_error", Text, nullable=True),  # what went wrong last: class and a short masked message (0012)
    Column("message_id", String(255), nullable=True),
    Column("resolved_by", String(ID_LENGTH), nullable=True),
    _ms("created_at"),
    _ms("updated_at"),
    Column("urgent", Boolean, nullable=False, server_default=false()),  # delivered during do-not-disturb too
    Column("alert_rule", String(ID_LENGTH), nullable=True),  # an alert: the rule that raised it
    Index(None, "status", "next_attempt_at"),  # rounds: due pending rows
    Index(None, "status", "locked_until"),  # expired leases
    Index(None, "status", "updated_at", "queue_id"),  # dead / unknown lists (keyset pages)
    Index(None, "alert_rule", "created_at"),  # the alerts list
    **MYSQL_TABLE_OPTIONS,
)

# --- alerts ----------------------------------------------------------------------------

# Rules stored from the dashboard (rules from the configuration live in memory).
alert_rules = Table(
    "alert_rules",
    metadata,
    Column("name", String(ID_LENGTH), primary_key=True),
    Column("definition", Json, nullable=False),
    _ms("created_at"),
    _ms("updated_at"),
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
    _ms("created_at"),
    Index(None, "created_at"),
    **MYSQL_TABLE_OPTIONS,
)

# Per rule and scope: when the last alert went out, and how many facts were folded since.
alert_throttles = Table(
    "alert_throttles",
    metadata,
    Column("rule", String(ID_LENGTH), primary_key=True),
    Column("scope", String(ID_LENGTH), primary_key=True),
    _ms("last_sent_at"),
    Column("folded", Integer, nullable=False),
    **MYSQL_TABLE_OPTIONS,
)

# --- dashboard ----------------------------------------------------------------------------

users = Table(
    "users",
    metadata,
    Column("username", String(64), primary_key=True),
    Column("password_hash", String(255), nullable=False),  # werkzeug scrypt/pbkdf2 hash, never the password
    Column("role", String(16), nullable=False),  # viewer | operator | admin
    Column("disabled", Boolean, nullable=False),
    _ms("created_at"),
    _ms("updated_at"),
    _ms("last_login_at", nullable=True),
    # Single sign-on (migration 0023): SHA-256 of the issuer and the subject; NULL: a local account.
    Column("identity", String(64), nullable=True),
    Index(None, "identity", unique=True),
    **MYSQL_TABLE_OPTIONS,
)

# Every operator action: who, when, what, before / after, why.
audit_log = Table(
    "audit_log",
    metadata,
    Column("id", String(36), primary_key=True),
    _ms("at"),
    Column("actor", String(64), nullable=False),
    Column("action", String(64), nullable=False),
    Column("target", String(255), nullable=True),
    Column("before", Json, nullable=True),
    Column("after", Json, nullable=True),
    Column("reason", Text, nullable=True),
    Index(None, "at", "id"),
    Index(None, "actor", "at"),
    Index(None, "action", "at"),
    **MYSQL_TABLE_OPTIONS,
)

# Dashboard sessions (migration 0008): the signed cookie holds a random token, this table its
# SHA-256, so a session ends for good when its row goes (logout, password reset, disable, role change).
user_sessions = Table(
    "user_sessions",
    metadata,
    Column("id", String(64), primary_key=True),  # hex SHA-256 of the cookie's token, never the token
    Column("username", String(64), nullable=False),
    _ms("created_at"),
    _ms("last_seen_at"),  # advanced at most once a minute per session
    _ms("expires_at"),  # min(created_at + lifetime, last_seen_at + idle timeout)
    Column("sign_on", Json, nullable=True),  # single sign-on: subject, access token, groups read at (0024)
    Index(None, "username"),  # end every session of a user
    Index(None, "expires_at"),  # prune the expired ones
    **MYSQL_TABLE_OPTIONS,
)

# Failed sign-ins of the last window (migration 0008), counted per client address and per account
# by every worker alike; older rows are pruned as new ones come.
login_failures = Table(
    "login_failures",
    metadata,
    Column("id", String(36), primary_key=True),
    _ms("at"),
    Column("address", String(64), nullable=False),  # the client address (IPv6: its /64)
    Column("username", String(64), nullable=True),  # the name typed, when it could name a user
    Index(None, "address", "at"),
    Index(None, "username", "at"),
    Index(None, "at"),
    **MYSQL_TABLE_OPTIONS,
)

# Personal API tokens (migration 0010): the token is shown once, this table keeps its SHA-256.
# It signs in as ``username`` with that user's current role (a disabled user's tokens stop at once).
api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", String(36), primary_key=True),  # a UUID: what the Users page and the audit trail name
    Column("username", String(64), nullable=False),
    Column("name", String(64), nullable=False),  # the label its creator gave it ("ci", "grafana")
    Column("digest", String(64), nullable=False),  # hex SHA-256 of the token, never the token
    _ms("created_at"),
    _ms("expires_at", nullable=True),  # None: until revoked
    _ms("last_used_at", nullable=True),
    _ms("revoked_at", nullable=True),
    _ms("window_start"),  # the rate-limit window this token's requests are counted in (DB clock)
    Column("window_count", Integer, nullable=False),  # requests counted in that window
    # Migration 0014: the token's first characters ("hai_Ab3xYz"), so that a person holding a copy can
    # tell which row it is (None for tokens made before); and the token sealed with a one-time pad that
    # only the creating browser's session holds, until the page that shows it once is opened (then None).
    Column("prefix", String(16), nullable=True),
    Column("sealed_secret", String(128), nullable=True),
    Index(None, "digest", unique=True),  # every request looks its token up by digest
    Index(None, "username", "created_at"),  # a user's tokens, oldest first
    Index(None, "username", "name", unique=True),  # one name per token of a user, revoked ones included (0014)
    **MYSQL_TABLE_OPTIONS,
)
