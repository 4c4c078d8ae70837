"""What replication the database server reports: for ``hai-scheduler db status``.

A PostgreSQL primary with a synchronous standby keeps every commit it acknowledged through a
failover; with only asynchronous standbys a failover can lose the last commits, and a lost claim
can mean a second run (README, "Running on a highly available database"). The primary knows:
``pg_stat_replication`` lists its standbys with their ``sync_state``, and
``synchronous_standby_names`` says which must confirm a commit. SQLite and MariaDB report
``not reported`` here (a Galera cluster is checked separately).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Engine

from scheduler_core.db.engine import dialect_kind


@dataclass(frozen=True)
class Replication:
    """The replication a PostgreSQL primary reports (``mode``: none | asynchronous | synchronous | unknown)."""

    mode: str
    standbys: int | None  # connected standbys, as this role may see them
    synchronous: int | None  # of those, confirming commits (sync or quorum)
    synchronous_standby_names: str | None
    in_recovery: bool | None  # True: this server is itself a standby (read-only)

    @property
    def warning(self) -> str | None:
        if self.in_recovery:
            return "this server is a standby (read-only): the scheduler cannot write here"
        if self.mode == "asynchronous":
            return ("only asynchronous standbys: a failover can lose the last commits, and a lost claim can run an "
                    "occurrence twice; configure a synchronous standby (synchronous_standby_names)")
        if self.mode == "unknown":
            return "the standbys' sync state is not visible to this role (grant it pg_monitor to see it)"
        return None

    def to_json(self) -> dict[str, object]:
        return {"mode": self.mode, "standbys": self.standbys, "synchronous_standbys": self.synchronous,
                "synchronous_standby_names": self.synchronous_standby_names, "in_recovery": self.in_recovery,
                "warning": self.warning}


NOT_REPORTED = Replication("not reported", None, None, None, None)


def replication_state(engine: Engine) -> Replication:
    """Read it with one statement (PostgreSQL); other databases: NOT_REPORTED."""
    if dialect_kind(engine) != "postgresql":
        return NOT_REPORTED
    with engine.connect().execution_options(hai_read_only=True) as conn:
        row = conn.execute(text(
            "SELECT pg_is_in_recovery() AS in_recovery,"
            " current_setting('synchronous_standby_names') AS names,"
            " (SELECT count(*) FROM pg_stat_replication) AS standbys,"
            " (SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')) AS synchronous,"
            " (SELECT count(*) FROM pg_stat_replication WHERE sync_state IS NULL) AS hidden")).one()
        conn.rollback()
    standbys, synchronous = int(row.standbys), int(row.synchronous)
    if standbys == 0:
        mode = "none"
    elif row.hidden:
        mode = "unknown"
    else:
        mode = "synchronous" if synchronous else "asynchronous"
    return Replication(mode, standbys, synchronous, row.names or None, bool(row.in_recovery))
