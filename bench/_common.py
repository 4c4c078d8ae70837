"""Plumbing shared by the bench/ scripts: databases, node processes, the DB clock, tables.

Databases. Every script but dashboard.py takes ``--backend sqlite|postgresql|mysql`` (repeatable: one table
row per backend) and/or ``--url URL`` (repeatable). A ``--backend`` database is created for
the run under a name of its own (``hai_bench_<script>_<random>``) on the local server
(``HAI_BENCH_POSTGRES_URL`` / ``HAI_BENCH_MYSQL_URL``, defaults below) and dropped at the end
unless ``--keep``; SQLite gets a fresh temporary file. A server ``--url`` is somebody's
database: the scripts clear the scheduler tables in it, so it needs ``--reset``, as
``burst.py`` does.

Node processes print one JSON object on the last line of stdout when they get SIGTERM;
their stderr goes to a file (a pipe nobody reads fills up and blocks the child).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import delete, event, select, text, update
from sqlalchemy.engine import Connection, Engine, Row, make_url
from sqlalchemy.sql import Executable

from scheduler_core.db import close_engine, create_engine, db_now_ms, dialect_kind, upgrade
from scheduler_core.db.tables import executions, logs, nodes, reach_queue, scheduler_meta, slots, tasks
from scheduler_core.executors import ExecutorRegistry
from scheduler_core.model import TaskDefinition, validate_task
from scheduler_core.store import TaskRepository
from scheduler_core.store.transactions import read, write

BENCH_DIR = Path(__file__).resolve().parent
PYTHON = sys.executable
SERVERS = {
    "postgresql": os.environ.get("HAI_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    "mysql": os.environ.get("HAI_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/mysql"),
}
BACKENDS = ("sqlite", "postgresql", "mysql")
MINUTE_MS = 60_000


# --- databases -------------------------------------------------------------------------------


@dataclass
class Target:
    """One database a benchmark runs on."""

    label: str  # sqlite | postgresql | mysql
    url: str
    cleanup: Callable[[], None] | None = None  # drops what we created; None for a given --url
    node_urls: tuple[str, ...] = ()  # node i connects with node_urls[i % len] (a Galera cluster); () -> url

    def node_url(self, index: int) -> str:
        return self.node_urls[index % len(self.node_urls)] if self.node_urls else self.url

    @property
    def shown(self) -> str:
        """The URL without credentials, for tables and logs."""
        return make_url(self.url).render_as_string(hide_password=True)


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """--backend / --url / --reset / --keep (the databases), --nodes and --json."""
    parser.add_argument("--backend", action="append", choices=BACKENDS,
                        help="run on a fresh database of this kind, created and dropped by the script "
                             "(repeatable; default: sqlite when no --url is given)")
    parser.add_argument("--url", action="append", default=[],
                        help="run on this existing database (repeatable); server URLs need --reset")
    parser.add_argument("--reset", action="store_true",
                        help="allow clearing the scheduler tables of a server --url")
    parser.add_argument("--keep", action="store_true", help="keep the databases created for --backend")
    parser.add_argument("--nodes", type=int, default=2, help="node processes")
    parser.add_argument("--json", action="store_true", help="also print every result row as JSON")


def galera_sync_wait_from_env(engine: Engine) -> None:
    """Bench only: ``HAI_BENCH_GALERA_SYNC_WAIT=N`` sets each new session's wsrep_sync_wait to N
    after the product's own set-up (bench/galera.py measures what the causal reads cost). Call it
    after ``init()``: the product refuses a session without causal reads at start-up."""
    value = os.environ.get("HAI_BENCH_GALERA_SYNC_WAIT")
    if not value:
        return

    def override(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"SET SESSION wsrep_sync_wait = {int(value)}")
        cursor.close()
        dbapi_connection.commit()

    event.listen(engine, "connect", override)
    engine.dispose()  # the health check's connection was made before


def kind_of(url: str) -> str:
    name = make_url(url).get_backend_name()
    return {"mariadb": "mysql"}.get(name, name)


def targets(args: argparse.Namespace, parser: argparse.ArgumentParser, script: str) -> list[Target]:
    """The databases named on the command line (created lazily by :func:`open_target`)."""
    for url in args.url:
        if kind_of(url) != "sqlite" and not args.reset:
            parser.error(f"--reset is required for {url}: the benchmark clears its scheduler tables")
    backends = args.backend or ([] if args.url else ["sqlite"])
    found = [Target(kind_of(url), url) for url in args.url]
    found += [Target(kind, f"{kind}:new:{script}") for kind in backends]
    return found


@contextlib.contextmanager
def open_target(target: Target, keep: bool = False) -> Iterator[Target]:
    """Create the database of a ``--backend`` target (fresh, own name); drop it afterwards."""
    if ":new:" not in target.url:
        yield target
        return
    script = target.url.rsplit(":", 1)[1]
    made = create_database(target.label, f"hai_bench_{script}_{uuid.uuid4().hex[:8]}")
    try:
        yield made
    finally:
        if made.cleanup is not None and not keep:
            made.cleanup()
        elif keep:
            print(f"kept database {made.shown}", file=sys.stderr)


def create_database(kind: str, name: str, replace: bool = False) -> Target:
    """A new empty database ``name`` (or a temporary SQLite file). ``replace`` drops it first."""
    if kind == "sqlite":
        folder = tempfile.mkdtemp(prefix=f"{name}-")
        return Target("sqlite", f"sqlite:///{folder}/bench.db", lambda: shutil.rmtree(folder, ignore_errors=True))
    url = make_url(SERVERS[kind]).set(database=name).render_as_string(hide_password=False)
    if replace:
        drop_database(kind, name)
    _admin(kind, f"CREATE DATABASE {name}" + (" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin" if kind == "mysql" else ""))
    return Target(kind, url, lambda: drop_database(kind, name))


def database_exists(kind: str, name: str) -> bool:
    query = ("SELECT 1 FROM pg_database WHERE datname = :name" if kind == "postgresql"
             else "SELECT 1 FROM information_schema.schemata WHERE schema_name = :name")
    engine = create_engine({"url": SERVERS[kind], "pool_size": 1})
    try:
        with engine.connect() as conn:
            return conn.execute(text(query), {"name": name}).first() is not None
    finally:
        close_engine(engine)


def drop_database(kind: str, name: str) -> None:
    _admin(kind, f"DROP DATABASE IF EXISTS {name}" + (" WITH (FORCE)" if kind == "postgresql" else ""))


def _admin(kind: str, statement: str) -> None:
    engine = create_engine({"url": SERVERS[kind], "pool_size": 1})
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(statement))
    finally:
        close_engine(engine)


def prepare(url: str) -> Engine:
    """An engine on ``url`` with the schema migrated and the scheduler's rows cleared."""
    engine = create_engine({"url": url, "pool_size": 4})
    upgrade(engine)

    def clear(conn: Connection) -> None:
        for table in (logs, executions, slots, tasks, nodes, reach_queue):
            conn.execute(delete(table))
        conn.execute(update(scheduler_meta).values(value=0))

    write(engine, clear)
    return engine


def register_tasks(engine: Engine, definitions: Iterable[TaskDefinition], batch: int = 500) -> int:
    """Validate task definitions as ``Scheduler.register`` does and insert them through the
    repository, ``batch`` per transaction (one at a time would take minutes for 10,000)."""
    repo = TaskRepository(engine)
    check = ExecutorRegistry().validate
    chunk: list[TaskDefinition] = []
    count = 0
    for task in definitions:
        chunk.append(validate_task(task, check))
        if len(chunk) == batch:
            count += _insert(engine, repo, chunk)
            chunk = []
    return count + (_insert(engine, repo, chunk) if chunk else 0)


def _insert(engine: Engine, repo: TaskRepository, chunk: list[TaskDefinition]) -> int:
    write(engine, lambda conn: [repo.insert(t, conn) for t in chunk])
    return len(chunk)


def table_bytes(engine: Engine, names: Sequence[str]) -> int:
    """Bytes on disk of tables with their indexes (and TOAST): what the database grew by.

    PostgreSQL ``pg_total_relation_size``; MySQL ``data_length + index_length`` after
    ``ANALYZE TABLE`` (InnoDB refreshes them lazily otherwise); SQLite the pages of the tables
    and their indexes from ``dbstat`` (which sees pages still in the WAL).
    """
    kind = dialect_kind(engine)

    def measure(conn: Connection) -> int:
        if kind == "postgresql":
            return sum(int(conn.execute(text("SELECT pg_total_relation_size(:t)"), {"t": n}).scalar_one())
                       for n in names)
        listed = ", ".join(f"'{n}'" for n in names)  # our own constant table names
        if kind == "mysql":
            conn.execute(text(f"ANALYZE TABLE {', '.join(names)}")).all()
            return int(conn.execute(text(
                "SELECT COALESCE(SUM(data_length + index_length), 0) FROM information_schema.tables "
                f"WHERE table_schema = DATABASE() AND table_name IN ({listed})")).scalar_one())
        return int(conn.execute(text(
            "SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN "
            f"(SELECT name FROM sqlite_master WHERE tbl_name IN ({listed}))")).scalar_one())

    return read(engine, measure)


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (None: no such process here)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()


def database_cpu_s(engine: Engine) -> float | None:
    """CPU seconds the database server has used so far, when it runs on this host (else None).

    PostgreSQL: the postmaster (the parent of this connection's backend) with the CPU of the
    backends it has reaped, plus every live backend; MySQL / MariaDB: the server process (all
    its threads). SQLite has no server (its CPU is the nodes'). The difference of two readings
    is the whole server's CPU in between, every database's on it."""
    kind = dialect_kind(engine)
    if kind == "sqlite":
        return None
    with engine.connect() as conn:
        asked = conn.execute(text("SELECT pg_backend_pid()" if kind == "postgresql" else "SELECT @@pid_file"))
        answer = str(asked.scalar_one())
        conn.rollback()
    tick = os.sysconf("SC_CLK_TCK")
    if kind == "mysql":  # the server's pid file (readable only on the server's host)
        try:
            fields = _proc_stat(int(Path(answer).read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            return None
        return None if fields is None else (int(fields[11]) + int(fields[12])) / tick
    backend = _proc_stat(int(answer))
    if backend is None:
        return None  # the server is on another host
    postmaster = int(backend[1])
    own = _proc_stat(postmaster)
    if own is None:
        return None
    total = sum(int(v) for v in own[11:15])  # utime, stime, cutime, cstime
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _proc_stat(int(entry))
            if fields is not None and fields[1] == str(postmaster):
                total += int(fields[11]) + int(fields[12])
    return total / tick


def scalar(engine: Engine, statement: Executable) -> int:
    """One number, read without taking SQLite's write lock (the nodes keep writing meanwhile)."""
    return int(read(engine, lambda conn: conn.execute(statement).scalar_one()))


def fetch(engine: Engine, statement: Executable) -> list[Row[Any]]:
    """All rows, read without taking SQLite's write lock."""
    return read(engine, lambda conn: list(conn.execute(statement).all()))


# --- the database clock ---------------------------------------------------------------------


def db_now(engine: Engine) -> int:
    """The database's time in unix ms, without any test offset (this process sets none)."""
    return scalar(engine, select(db_now_ms()))


def next_boundary(engine: Engine, at_least_s: float) -> int:
    """The first minute boundary (DB clock) at least ``at_least_s`` seconds from now."""
    soon = db_now(engine) + int(at_least_s * 1000)
    return soon - soon % MINUTE_MS + MINUTE_MS


def offset_for(engine: Engine, instant_ms: int, lead_s: float) -> int:
    """The ``HAI_TEST_DB_CLOCK_OFFSET_MS`` that makes the DB clock read ``instant_ms`` in ``lead_s``."""
    return instant_ms - int(lead_s * 1000) - db_now(engine)


# --- node processes -------------------------------------------------------------------------


@dataclass
class NodeProcess:
    name: str
    process: subprocess.Popen[str]
    stderr_path: Path
    result: dict[str, Any] = field(default_factory=dict)

    def stderr_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def spawn(script: str, argv: Sequence[str], name: str, env: dict[str, str] | None = None) -> NodeProcess:
    """Start ``bench/<script>`` with ``argv`` in its own process; stderr goes to a temp file."""
    handle, path = tempfile.mkstemp(prefix=f"hai-bench-{name}-", suffix=".log")
    with os.fdopen(handle, "w") as stderr:
        process = subprocess.Popen([PYTHON, str(BENCH_DIR / script), *argv], stdout=subprocess.PIPE,
                                   stderr=stderr, text=True, env={**os.environ, **(env or {})})
    return NodeProcess(name, process, Path(path))


def stop_all(procs: Sequence[NodeProcess], timeout_s: float = 300) -> list[dict[str, Any]]:
    """SIGTERM every node, then read the JSON object each prints last."""
    for node in procs:
        if node.process.poll() is None:
            node.process.send_signal(signal.SIGTERM)
    for node in procs:
        out, _ = node.process.communicate(timeout=timeout_s)
        lines = [line for line in out.strip().splitlines() if line.startswith("{")]
        if node.process.returncode != 0 or not lines:
            raise RuntimeError(f"node {node.name} exited with {node.process.returncode}:\n{node.stderr_tail()}")
        node.result = json.loads(lines[-1])
        node.stderr_path.unlink(missing_ok=True)
    return [node.result for node in procs]


def kill_all(procs: Sequence[NodeProcess]) -> None:
    """Last resort on the way out after an error: no node outlives its benchmark."""
    for node in procs:
        if node.process.poll() is None:
            node.process.kill()
            node.process.wait()


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str, procs: Sequence[NodeProcess] = (),
               poll_s: float = 0.2) -> None:
    """Poll ``condition`` until true; fail early when a node died, or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        for node in procs:
            if node.process.poll() is not None:
                raise RuntimeError(f"node {node.name} died while waiting for {what}:\n{node.stderr_tail()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout_s:.0f} s")
        time.sleep(poll_s)


# --- figures and tables ------------------------------------------------------------------------

COUNTED = ("statements", "commits", "rollbacks", "begins", "checkouts")  # what _node.py counts


def sql_per(stats: Sequence[dict[str, Any]], divisor: float, kind: str) -> dict[str, float | None]:
    """The nodes' SQL per ``divisor`` (a tick, an execution, a delivery), as burst.py defines it:
    statements (every cursor statement), transactions (commits + rollbacks) and every SQL
    command sent (statements + commits + rollbacks; on a server also the driver's BEGIN and the
    pool's pre-ping at each check-out, which SQLite does in-process). None when there was
    nothing to divide by (a peer that ran no job)."""
    total = {name: sum(int(s.get(name, 0)) for s in stats) for name in COUNTED}
    transactions = total["commits"] + total["rollbacks"]
    commands = total["statements"] + transactions
    if kind != "sqlite":
        commands += total["begins"] + total["checkouts"]
    if divisor <= 0:
        return {"statements": None, "transactions": None, "sql_commands": None}
    return {"statements": round(total["statements"] / divisor, 2), "transactions": round(transactions / divisor, 2),
            "sql_commands": round(commands / divisor, 2)}


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..1) of ``values``; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(q * len(ordered)) - 1)])


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """p50 / p99 / max of a sample (lateness, response times)."""
    return {"p50": percentile(values, 0.5), "p99": percentile(values, 0.99),
            "max": float(max(values)) if values else None}


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, list | tuple):
        return " / ".join(fmt(v) for v in value)
    return str(value)


def print_table(columns: Sequence[tuple[str, str]], rows: Sequence[dict[str, Any]], title: str | None = None) -> None:
    """A Markdown table (pastes straight into RESULTS.md): ``columns`` = (key, header).

    Figures are right-aligned, text columns left-aligned."""
    cells = [[header for _, header in columns]] + [[fmt(row.get(key)) for key, _ in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    numeric = [all(isinstance(row.get(key), int | float | list | tuple | None) for row in rows) for key, _ in columns]
    if title:
        print(f"\n{title}\n")
    for index, line in enumerate(cells):
        shown = [c.rjust(w) if right else c.ljust(w) for c, w, right in zip(line, widths, numeric, strict=True)]
        print("| " + " | ".join(shown) + " |")
        if index == 0:
            print("|" + "|".join("-" * (w + 1) + (":" if right else "-") for w, right in zip(widths, numeric,
                                                                                             strict=True)) + "|")
    sys.stdout.flush()


def base_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser whose --help shows the script's docstring (what it measures and how to run it)."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def run_on_targets(args: argparse.Namespace, parser: argparse.ArgumentParser, script: str,
                   measure: Callable[[Target], dict[str, Any]]) -> list[dict[str, Any]]:
    """``measure`` every database of the command line, in order; one result row each.

    A database whose run fails gets a row with its error (the others still run), and the
    script exits with status 1 after printing its table. SIGTERM ends the script like Ctrl-C,
    through the clean-up (node processes stopped, databases it created dropped)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rows = []
    for target in targets(args, parser, script):
        with open_target(target, args.keep) as opened:
            print(f"[{script}] {opened.label}: {opened.shown}", file=sys.stderr, flush=True)
            try:
                rows.append({"backend": opened.label, **measure(opened)})
            except Exception as exc:
                print(f"[{script}] {opened.label} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                rows.append({"backend": opened.label, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
    return rows


def finish(columns: Sequence[tuple[str, str]], rows: Sequence[dict[str, Any]], title: str, as_json: bool) -> None:
    """The end of a benchmark: its table, each row as JSON when asked, then any failures."""
    print_table(columns, rows, title)
    if as_json:
        for row in rows:
            print(json.dumps(row))
    report_failures(rows)


def report_failures(rows: Sequence[dict[str, Any]]) -> None:
    """After the table: name the databases whose run failed, and exit non-zero."""
    failed = [row for row in rows if row.get("error")]
    for row in failed:
        print(f"{row['backend']}: FAILED -- {row['error']}")
    if failed:
        sys.exit(1)
