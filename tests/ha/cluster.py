"""A real highly available PostgreSQL for tests: pg_auto_failover from Debian's packages.

One monitor and two data nodes (a primary and a standby, synchronous by default), each a
``pg_autoctl run`` process group of its own, as the ``postgres`` OS user when this process is
root, under one temporary directory, on free local ports. No pytest in here: ``bench/`` can use it.

    cluster = Cluster(standby_faketime="+5s").start()
    try:
        conninfo = cluster.url("postgres")          # multi-host, target_session_attrs=read-write
        old = cluster.primary()
        killed_at = cluster.kill_primary(with_keeper=True)  # SIGKILL: its postmaster and pg_autoctl
        recovery = cluster.wait_failover(old)        # the other node writable, the old one rejoined
    finally:
        cluster.stop()

Every wait has a deadline and raises :class:`HAClusterError` with the monitor's view and the
tail of the relevant logs. See tests/ha/README.md for what pg_autoctl does on each kind of kill.
"""

from __future__ import annotations

import atexit
import contextlib
import getpass
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

T = TypeVar("T")

# HAI_TEST_PG_AUTOCTL names another binary (a path that does not exist shows the skip).
PG_AUTOCTL = os.environ.get("HAI_TEST_PG_AUTOCTL") or shutil.which("pg_autoctl") or "/usr/bin/pg_autoctl"
HOST = "127.0.0.1"
PRIMARY_STATES = ("primary", "wait_primary", "single")
PROMOTION_GOALS = ("prepare_promotion", "stop_replication", "wait_primary", "primary")
# Monitor settings that make a dead primary noticed in ~1 s and promoted in seconds rather than
# the defaults' ~20-50 s. The keeper's network_partition_timeout stays below the demote
# timeout, the rule that keeps a partitioned primary from taking writes after the promotion.
FAST_MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "3000",
    "pgautofailover.primary_demote_timeout": "6000",
    "pgautofailover.startup_grace_period": "2000",
}
FAST_KEEPER_SETTINGS = {"timeout.network_partition_timeout": "4"}
# pg_autoctl sizes shared_buffers from the machine's RAM (6 GB on 24 GB): three of those for a
# test is rude to everything else running, so every instance gets a small one.
SMALL_SERVER_SETTINGS = "shared_buffers = '128MB'\nmax_connections = 200\n"


class HAClusterError(RuntimeError):
    """The topology did not reach the state asked for in time, or a command failed."""


class NoFailoverError(HAClusterError):
    """The old primary came back as the primary (pg_autoctl restarted it) with no promotion."""


def find_bindir() -> Path | None:
    """The newest PostgreSQL bin directory whose server has the pgautofailover extension."""
    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True):
        version = Path(bindir).parent.name
        if Path(f"/usr/share/postgresql/{version}/extension/pgautofailover.control").exists():
            return Path(bindir)
    return None


def _version_key(path: str) -> float:
    try:
        return float(Path(path).parent.name)
    except ValueError:
        return 0.0


def unavailable_reason() -> str | None:
    """Why this machine cannot run the topology, or None when it can."""
    if not Path(PG_AUTOCTL).exists():
        return (f"pg_autoctl is not installed ({PG_AUTOCTL} missing; "
                "apt-get install pg-auto-failover-cli postgresql-15-auto-failover)")
    if find_bindir() is None:
        return "no PostgreSQL server with the pgautofailover extension (apt-get install postgresql-15-auto-failover)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres OS user to run PostgreSQL as"
    return None


def faketime_library() -> str | None:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1")) + sorted(
        glob.glob("/usr/lib/faketime/libfaketime.so.1"))
    return found[0] if found else None


def parse_offset(offset: str) -> float:
    """Seconds of a libfaketime relative offset such as ``+5s``, ``-2m``, ``+1h``, ``+1.5``."""
    match = re.fullmatch(r"([+-])(\d+(?:\.\d+)?)([smhd]?)", offset.strip())
    if not match:
        raise ValueError(f"faketime offset must look like +5s, -2m or +1h (got {offset!r})")
    sign, number, unit = match.groups()
    seconds = float(number) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    return seconds if sign == "+" else -seconds


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((HOST, 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


def _tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 200 * lines))
            text = handle.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"({path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


# A process is (pid, start time in clock ticks): a pid alone may be another process by the time we
# look again, and this harness signals only the processes it started or that its postmasters forked.
Proc = tuple[int, int]


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat fields from the state on (field 3), or None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None


def _proc(pid: int) -> Proc | None:
    fields = _stat(pid)
    return (pid, int(fields[19])) if fields and len(fields) > 19 else None


def _running(proc: Proc) -> bool:
    """The very process (same start time) still runs (a zombie does not count)."""
    fields = _stat(proc[0])
    return fields is not None and len(fields) > 19 and int(fields[19]) == proc[1] and fields[0] != "Z"


def _children_of(pid: int) -> list[Proc]:
    """The processes whose parent is ``pid`` (a postmaster's backends and auxiliary processes)."""
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        fields = _stat(int(Path(stat).parent.name))
        if fields and len(fields) > 19 and fields[1] == str(pid):
            found.append((int(Path(stat).parent.name), int(fields[19])))
    return found


def _wait_gone(procs: list[Proc], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(_running(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"  # a zombie is dead for our purposes


@dataclass
class Node:
    """One pg_auto_failover node: the monitor or a data node."""

    name: str
    port: int
    directory: Path
    faketime: str | None = None
    node_id: int | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    env: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def pgdata(self) -> Path:
        return self.directory / "pgdata"

    @property
    def run_log(self) -> Path:
        return self.directory / "pg_autoctl.log"

    @property
    def address(self) -> tuple[str, int]:
        return (HOST, self.port)

    def postmaster_pid(self) -> int | None:
        """The pid in PGDATA/postmaster.pid, if the file is there and that process is alive."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _alive(pid) else None

    def keeper_alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def server_log(self) -> Path | None:
        logs = sorted((self.pgdata / "log").glob("*.log"), key=lambda p: p.stat().st_mtime)
        return logs[-1] if logs else None


@dataclass
class Kill:
    """What :meth:`Cluster.kill_primary` did."""

    node: Node
    wall: float  # time.time() of the kill
    monotonic: float
    postmaster: Proc
    children: list[Proc]
    with_keeper: bool
    last_event_id: int


@dataclass
class Recovery:
    """How the topology came back after a kill."""

    outcome: str  # "failover": the standby was promoted; "restart": pg_autoctl restarted the old primary
    old_primary: str
    new_primary: str
    killed_at: float  # wall clock of the kill
    writable_after_s: float  # kill -> first write acknowledged by the (new) primary
    rejoined_after_s: float | None  # kill -> primary + standby again, in the cluster's replication mode
    events: list[str]  # the monitor's events since the kill

    def __str__(self) -> str:
        rejoined = ""
        if self.rejoined_after_s is not None:
            rejoined = f", old primary rejoined after {self.rejoined_after_s:.1f} s"
        return (f"{self.outcome}: {self.old_primary} -> {self.new_primary}, writable after "
                f"{self.writable_after_s:.1f} s{rejoined}")


@dataclass
class Switchover:
    old_primary: str
    new_primary: str
    writable_after_s: float  # command start -> the new primary acknowledges a write
    unwritable_s: float  # last write acknowledged by the old primary -> first by the new one (probed ~5/s)
    duration_s: float  # command start -> the old primary is a standby again, in the cluster's mode


_live: list[Cluster] = []


@atexit.register
def _stop_all() -> None:
    for cluster in list(_live):
        cluster.stop()


class Cluster:
    """A pg_auto_failover formation: a monitor, node1 (first primary) and node2 (first standby).

    ``standby_faketime``: a libfaketime offset ("+5s") for node2's pg_autoctl run and so for
    the postgres it launches; verified with ``SELECT now()`` at start (``clock_offsets``).
    ``synchronous``: False sets replication-quorum false on both nodes: an asynchronous standby.
    ``fast_failover``: tune the monitor's health checks (FAST_MONITOR_SETTINGS); False keeps
    pg_auto_failover's defaults. ``ssl``: --ssl-self-signed instead of --no-ssl.
    """

    def __init__(self, *, standby_faketime: str | None = None, synchronous: bool = True,
                 fast_failover: bool = True, ssl: bool = False, base_dir: str | Path | None = None,
                 verbose: bool = True) -> None:
        if standby_faketime is not None:
            parse_offset(standby_faketime)
        self.standby_faketime = standby_faketime
        self.synchronous = synchronous
        self.fast_failover = fast_failover
        self.ssl = ssl
        self.verbose = verbose
        self._base_parent = Path(base_dir) if base_dir else None
        self.base: Path | None = None
        self.bindir = find_bindir()
        self.monitor: Node | None = None
        self.nodes: list[Node] = []
        self.last_kill: Kill | None = None
        self.timings: dict[str, float] = {}
        self.clock_check: dict[str, float] = {}
        root = os.geteuid() == 0
        self.user = "postgres" if root else getpass.getuser()
        if root:
            entry = pwd.getpwnam("postgres")
            self._uid, self._gid = entry.pw_uid, entry.pw_gid
            self._as_user: dict[str, Any] = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        else:
            self._uid, self._gid = os.getuid(), os.getgid()
            self._as_user = {}

    # --- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 180) -> Cluster:
        """Create and run the monitor, the primary and the standby; wait until replication is
        in the asked mode. Stops everything it started when it fails."""
        problem = unavailable_reason()
        if problem:
            raise HAClusterError(problem)
        if self.standby_faketime and not faketime_library():
            raise HAClusterError("libfaketime is not installed (apt-get install faketime)")
        began = time.monotonic()
        _live.append(self)
        try:
            self._start(began + timeout)
        except BaseException:
            self.stop()
            raise
        self.timings["start_s"] = time.monotonic() - began
        self._say(f"ha cluster up in {self.timings['start_s']:.1f} s (monitor {self.timings['monitor_s']:.1f} s, "
                  f"primary {self.timings['primary_s']:.1f} s, standby {self.timings['standby_s']:.1f} s); "
                  f"{'synchronous' if self.synchronous else 'asynchronous'} standby; {self.url()}")
        return self

    def _start(self, deadline: float) -> None:
        parent = self._base_parent or Path(tempfile.gettempdir())
        self.base = Path(tempfile.mkdtemp(prefix="hai-ha-", dir=parent))
        os.chmod(self.base, 0o755)
        os.chown(self.base, self._uid, self._gid)
        ports = _free_ports(3)
        self.monitor = self._node("monitor", ports[0])
        self.nodes = [self._node("node1", ports[1]), self._node("node2", ports[2], self.standby_faketime)]

        mark = time.monotonic()
        self._initdb([self.monitor, self.nodes[0]], deadline)  # node1's postgresql.auto.conf reaches node2
        self._pg_autoctl(self.monitor, "create", "monitor", "--pgdata", str(self.monitor.pgdata),
                         "--pgport", str(self.monitor.port), "--hostname", HOST, "--auth", "trust",
                         *self._ssl_args(), "--pgctl", str(self._bin("pg_ctl")), deadline=deadline)
        self._pg_autoctl(self.monitor, "config", "set", "postgresql.listen_addresses", HOST, deadline=deadline)
        self._spawn_run(self.monitor)
        self._wait("the monitor answers", lambda: self._monitor_ready(), deadline, [self.monitor])
        if self.fast_failover:
            with self._connect(self.monitor, "pg_auto_failover") as conn:
                for name, value in FAST_MONITOR_SETTINGS.items():
                    conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(*name.split(".")),
                                                                         sql.Literal(value)))
                conn.execute("SELECT pg_reload_conf()")
        self.timings["monitor_s"] = time.monotonic() - mark

        mark = time.monotonic()
        primary = self.nodes[0]
        self._create_data_node(primary, deadline)
        self._spawn_run(primary)
        self._wait("node1 is the single primary", lambda: self._reported(primary, "single"), deadline,
                   [primary, self.monitor])
        self.timings["primary_s"] = time.monotonic() - mark

        mark = time.monotonic()
        standby = self.nodes[1]
        self._create_data_node(standby, deadline)  # registers, pg_basebackup from node1
        self._spawn_run(standby)
        if not self.synchronous:
            for node in self.nodes:
                self._pg_autoctl(node, "set", "node", "replication-quorum", "false", "--pgdata", str(node.pgdata),
                                 deadline=deadline)
        self.wait_healthy(timeout=max(1.0, deadline - time.monotonic()))
        self.timings["standby_s"] = time.monotonic() - mark
        if self.standby_faketime:
            self._check_faketime()

    def stop(self) -> None:
        """Stop every process this cluster started (its pg_autoctl process groups, then any of its
        postmasters and their children left) and remove its directory. Safe to call twice, and
        after a failed start."""
        everything = [*self.nodes, *([self.monitor] if self.monitor else [])]
        leftovers: list[Proc] = []
        for node in everything:
            pid = node.postmaster_pid()
            postmaster = _proc(pid) if pid else None
            if postmaster:
                leftovers += [postmaster, *_children_of(postmaster[0])]
        if self.last_kill:
            leftovers += [self.last_kill.postmaster, *self.last_kill.children]
        for node in everything:
            if node.keeper_alive():  # not reaped yet: its process group id is still ours
                assert node.process is not None
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGTERM)  # pg_autoctl stops its postgres (fast)
        deadline = time.monotonic() + 20
        for node in everything:
            if node.process is None:
                continue
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            if node.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.process.wait(timeout=5)
        for proc in leftovers:
            if _running(proc):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc[0], signal.SIGKILL)
        _wait_gone(leftovers, 10)
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None
        if self in _live:
            _live.remove(self)

    # --- addresses and connections -----------------------------------------------------

    @property
    def hosts(self) -> list[tuple[str, int]]:
        """(host, port) of the data nodes, in the order the URL lists them."""
        return [node.address for node in self.nodes]

    def url(self, database: str = "postgres", target_session_attrs: str | None = "read-write",
            **params: str) -> str:
        """A libpq multi-host URL for the data nodes: whichever is writable answers."""
        hosts = ",".join(f"{host}:{port}" for host, port in self.hosts)
        query = {**({"target_session_attrs": target_session_attrs} if target_session_attrs else {}), **params}
        suffix = "?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else ""
        return f"postgresql://{self.user}@{hosts}/{database}{suffix}"

    def node(self, name: str) -> Node:
        for node in [*self.nodes, *([self.monitor] if self.monitor else [])]:
            if node.name == name:
                return node
        raise KeyError(name)

    def connect(self, node: Node | str, database: str = "postgres", timeout: float = 3,
                **kwargs: Any) -> psycopg.Connection[Any]:
        """An autocommit connection straight to one node."""
        return self._connect(self._as_node(node), database, timeout, **kwargs)

    def node_url(self, url: str, index: int) -> str:
        """Every scheduler node connects with the same multi-host URL: libpq finds the primary."""
        return url

    def create_database(self, name: str) -> str:
        """CREATE DATABASE on the primary (it reaches the standby by replication); returns url(name)."""
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    # --- who is who -------------------------------------------------------------------

    def state(self) -> list[dict[str, Any]]:
        """The monitor's pgautofailover.node rows (reportedstate, goalstate, health, ...)."""
        assert self.monitor is not None
        with self._connect(self.monitor, "pg_auto_failover") as conn, conn.cursor(
                row_factory=dict_row) as cur:
            cur.execute("SELECT nodeid, nodename, nodeport, reportedstate::text AS reported, goalstate::text AS goal,"
                        " health, reportedpgisrunning AS running, reportedrepstate AS repstate,"
                        " replicationquorum AS quorum, reportedlsn::text AS lsn, reportedtli AS tli"
                        " FROM pgautofailover.node ORDER BY nodeid")
            return list(cur.fetchall())

    def describe(self) -> str:
        try:
            rows = self.state()
        except Exception as exc:
            return f"(monitor unreachable: {exc})"
        return "; ".join(f"{r['nodename']}:{r['nodeport']} {r['reported']}/{r['goal']} health={r['health']} "
                         f"pg={'up' if r['running'] else 'down'} rep={r['repstate']}" for r in rows)

    def primary(self) -> Node:
        """The data node the monitor has as primary now (reported and assigned)."""
        for row in self.state():
            if row["reported"] in PRIMARY_STATES and row["goal"] in PRIMARY_STATES:
                return self.node(row["nodename"])
        raise HAClusterError(f"no primary now: {self.describe()}")

    def standby(self) -> Node:
        """The data node the monitor has as secondary now (reported and assigned)."""
        for row in self.state():
            if row["reported"] == "secondary" and row["goal"] == "secondary":
                return self.node(row["nodename"])
        raise HAClusterError(f"no secondary now: {self.describe()}")

    def other(self, node: Node | str) -> Node:
        name = self._as_node(node).name
        return next(n for n in self.nodes if n.name != name)

    # --- waits ------------------------------------------------------------------------

    def wait_primary_ready(self, timeout: float = 60) -> Node:
        """Until the monitor has a primary and it acknowledges a write; returns it."""
        def ready() -> Node | None:
            node = self.primary()
            return node if self._writable(node) else None
        return self._wait("a writable primary", ready, time.monotonic() + timeout, self.nodes)

    def wait_sync_standby(self, timeout: float = 60) -> tuple[Node, Node]:
        """Until node states are primary / secondary and the standby is synchronous (in
        synchronous_standby_names, pg_stat_replication.sync_state 'sync' or 'quorum': pg_auto_failover
        writes ``ANY 1 (...)``, which PostgreSQL reports as quorum). Returns (primary, standby)."""
        return self._wait("a primary with a synchronous standby", lambda: self._replicating(True),
                          time.monotonic() + timeout, self.nodes)

    def wait_async_standby(self, timeout: float = 60) -> tuple[Node, Node]:
        """Until primary / secondary, the standby streaming and synchronous_standby_names empty."""
        return self._wait("a primary with an asynchronous standby", lambda: self._replicating(False),
                          time.monotonic() + timeout, self.nodes)

    def wait_standby_replayed(self, timeout: float = 30) -> Node:
        """Until the standby has replayed everything the primary has written so far. (A synchronous
        commit waits for the standby to flush the WAL, not to apply it: a read there may lag.)"""
        with self._connect(self.primary()) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        target = row[0]

        def replayed() -> Node | None:
            standby = self.standby()
            with self._connect(standby) as conn:
                done = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone()
            return standby if done and done[0] else None
        return self._wait(f"the standby to replay up to {target}", replayed, time.monotonic() + timeout, self.nodes)

    def wait_healthy(self, timeout: float = 90) -> tuple[Node, Node]:
        """Until the topology is back to primary + standby in this cluster's replication mode."""
        self.wait_primary_ready(timeout)
        wait = self.wait_sync_standby if self.synchronous else self.wait_async_standby
        return wait(timeout)

    # --- faults -----------------------------------------------------------------------

    def kill_primary(self, with_keeper: bool = False) -> float:
        """SIGKILL the primary's postmaster (pid from PGDATA/postmaster.pid); returns time.time() of it.

        ``with_keeper=False``: only the postmaster. That node's pg_autoctl restarts postgres at once
        while its keeper tells the monitor postgres is down: a race (see README) whose outcome
        ``wait_recovered`` reports. ``with_keeper=True``: the node's whole ``pg_autoctl run`` process
        group too (the machine died): nothing restarts it, the monitor fails over for sure, and
        ``wait_failover`` starts that node's pg_autoctl again once the other one is primary.
        Details in ``self.last_kill``.
        """
        node = self.primary()
        pid = node.postmaster_pid()
        if pid is None:
            raise HAClusterError(f"{node.name} is primary but has no live postmaster: {self.describe()}")
        postmaster, children = _proc(pid), _children_of(pid)
        if postmaster is None:
            raise HAClusterError(f"{node.name}'s postmaster (pid {pid}) is gone: {self.describe()}")
        last_event = self._last_event_id()
        wall, mono = time.time(), time.monotonic()
        if with_keeper and node.keeper_alive():
            assert node.process is not None
            os.killpg(node.process.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if with_keeper and node.process is not None:
            node.process.wait(timeout=10)
        self.last_kill = Kill(node, wall, mono, postmaster, children, with_keeper, last_event)
        self._say(f"SIGKILL {node.name}'s postmaster (pid {pid}){' and its pg_autoctl' if with_keeper else ''}")
        return wall

    def wait_recovered(self, timeout: float = 120, rejoin: bool = True) -> Recovery:
        """After ``kill_primary``: until a primary acknowledges writes again, whichever way
        (``outcome`` says: "failover" or "restart"); with ``rejoin``, until the topology is whole."""
        return self._recover(None, timeout, rejoin, require_failover=False)

    def wait_failover(self, old_primary: Node | str, timeout: float = 120, rejoin: bool = True) -> Recovery:
        """Until the other node is primary and acknowledges a write; then (``rejoin``) until the old
        one is a secondary again (synchronous, in a synchronous cluster). Raises NoFailoverError
        when pg_autoctl restarted the old primary and the monitor never promoted the standby."""
        return self._recover(self._as_node(old_primary), timeout, rejoin, require_failover=True)

    def switchover(self, timeout: float = 120) -> Switchover:
        """``pg_autoctl perform switchover`` (planned): the standby becomes primary, the old primary
        its standby. Probes both nodes while the command runs (``unwritable_s``: how long neither
        acknowledged a write) and waits for the topology to be whole again."""
        assert self.monitor is not None
        old = self.primary()
        new = self.other(old)
        began = time.monotonic()
        deadline = began + timeout
        args = ["perform", "switchover", "--pgdata", str(self.monitor.pgdata), "--wait", str(int(timeout))]
        last_old_write = began
        new_writable_at: float | None = None
        with tempfile.TemporaryFile() as out:
            process = self._popen(self.monitor, args, out)
            while process.poll() is None and time.monotonic() < deadline:
                now = time.monotonic()
                if new_writable_at is None and self._writable(old):
                    last_old_write = now
                elif new_writable_at is None and self._writable(new):
                    new_writable_at = time.monotonic()
                time.sleep(0.05)
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            out.seek(0)
            text = out.read().decode("utf-8", "replace")
        with self.monitor.run_log.open("a") as log:
            log.write(f"\n$ pg_autoctl {' '.join(args)}\n{text}")
        if process.returncode != 0:
            raise HAClusterError(f"pg_autoctl {' '.join(args)} exited with {process.returncode}:\n"
                                 f"{chr(10).join(text.splitlines()[-40:])}\nmonitor: {self.describe()}\n"
                                 f"{self._more_logs(self.nodes)}")

        def writable() -> float | None:
            return time.monotonic() if self.primary().name == new.name and self._writable(new) else None
        if new_writable_at is None:
            new_writable_at = self._wait(f"{new.name} writable after the switchover", writable, deadline, self.nodes)
        self.wait_healthy(timeout=max(1.0, deadline - time.monotonic()))
        result = Switchover(old.name, new.name, new_writable_at - began, new_writable_at - last_old_write,
                            time.monotonic() - began)
        self._say(f"switchover {old.name} -> {new.name}: no writable primary for {result.unwritable_s:.1f} s, "
                  f"{new.name} writable {result.writable_after_s:.1f} s after the command started, "
                  f"whole again after {result.duration_s:.1f} s")
        return result

    def make_primary(self, node: Node | str, timeout: float = 120) -> None:
        """Switch over unless ``node`` is the primary already (e.g. to put the faked clock on the standby)."""
        if self.primary().name == self._as_node(node).name:
            return
        self.switchover(timeout)

    def set_synchronous(self, synchronous: bool, timeout: float = 60) -> None:
        """Switch the replication mode (replication-quorum of both nodes) and wait for it."""
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            self._pg_autoctl(node, "set", "node", "replication-quorum", "true" if synchronous else "false",
                             "--pgdata", str(node.pgdata), deadline=deadline)
        self.synchronous = synchronous
        self.wait_healthy(timeout=max(1.0, deadline - time.monotonic()))

    def clock_offsets(self) -> dict[str, float]:
        """Each data node's ``SELECT now()`` (its transaction's start) minus this process's clock, in seconds."""
        offsets = {}
        for node in self.nodes:
            with self._connect(node) as conn:
                before = time.time()
                row = conn.execute("SELECT extract(epoch FROM now())::float8").fetchone()
                after = time.time()
            assert row is not None
            offsets[node.name] = float(row[0]) - (before + after) / 2
        return offsets

    def logs(self, node: Node | str, lines: int = 40) -> str:
        """The tail of a node's pg_autoctl output and of its PostgreSQL log."""
        node = self._as_node(node)
        parts = [f"--- {node.name}: pg_autoctl ({node.run_log}) ---", _tail(node.run_log, lines)]
        server_log = node.server_log()
        if server_log:
            parts += [f"--- {node.name}: postgres ({server_log}) ---", _tail(server_log, lines)]
        return "\n".join(parts)

    # --- internals --------------------------------------------------------------------

    def _say(self, message: str) -> None:
        if self.verbose:
            print(f"[ha] {message}", flush=True)

    def _bin(self, name: str) -> Path:
        assert self.bindir is not None
        return self.bindir / name

    def _ssl_args(self) -> list[str]:
        return ["--ssl-self-signed"] if self.ssl else ["--no-ssl"]

    def _as_node(self, node: Node | str) -> Node:
        return self.node(node) if isinstance(node, str) else node

    def _node(self, name: str, port: int, faketime: str | None = None) -> Node:
        assert self.base is not None and self.bindir is not None
        directory = self.base / name
        node = Node(name, port, directory, faketime)
        for sub in ("", "config", "share", "run", "tmp"):
            path = directory / sub
            path.mkdir(mode=0o700, exist_ok=True)
            os.chown(path, self._uid, self._gid)
        node.env = {
            "PATH": f"{self.bindir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(directory), "USER": self.user, "LOGNAME": self.user, "LANG": "C.UTF-8",
            "XDG_CONFIG_HOME": str(directory / "config"), "XDG_DATA_HOME": str(directory / "share"),
            "XDG_RUNTIME_DIR": str(directory / "run"), "TMPDIR": str(directory / "tmp"),
            "PGDATA": str(node.pgdata), "PG_CONFIG": str(self.bindir / "pg_config"),
        }
        if faketime:
            library = faketime_library()
            assert library is not None
            # Only the wall clock moves (as a machine's clock set wrong does); see tests/helpers/processes.py.
            node.env.update({"LD_PRELOAD": library, "FAKETIME": faketime, "DONT_FAKE_MONOTONIC": "1"})
        return node

    def _create_data_node(self, node: Node, deadline: float) -> None:
        assert self.monitor is not None
        monitor_uri = f"postgres://autoctl_node@{HOST}:{self.monitor.port}/pg_auto_failover?sslmode=prefer"
        self._pg_autoctl(node, "create", "postgres", "--pgdata", str(node.pgdata), "--pgport", str(node.port),
                         "--pgctl", str(self._bin("pg_ctl")), "--hostname", HOST, "--listen", HOST,
                         "--name", node.name, "--monitor", monitor_uri, "--auth", "trust", *self._ssl_args(),
                         "--dbname", "postgres", deadline=deadline)
        if self.fast_failover:
            for key, value in FAST_KEEPER_SETTINGS.items():
                self._pg_autoctl(node, "config", "set", "--pgdata", str(node.pgdata), key, value, deadline=deadline)

    def _initdb(self, nodes: list[Node], deadline: float) -> None:
        """initdb as pg_autoctl would (``--auth=trust``), side by side, without fsyncs (a test
        machine does not crash mid-test; a killed process loses nothing the OS was given), plus
        small settings."""
        running = []
        for node in nodes:
            command = [str(self._bin("initdb")), "-D", str(node.pgdata), "--auth=trust", "--no-sync", "-U", self.user]
            running.append((node, subprocess.Popen(command, env=node.env, cwd=self.base, stdout=subprocess.PIPE,
                                                   stderr=subprocess.STDOUT, text=True, **self._as_user)))
        for node, process in running:
            try:
                output, _ = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                output, _ = process.communicate()
            if process.returncode != 0:
                raise HAClusterError(f"initdb for {node.name} exited with {process.returncode}: {output[-2000:]}")
            with (node.pgdata / "postgresql.auto.conf").open("a") as conf:
                conf.write(SMALL_SERVER_SETTINGS)

    def _popen(self, node: Node, args: list[str], log: Any) -> subprocess.Popen[bytes]:
        assert self.base is not None
        return subprocess.Popen([PG_AUTOCTL, *args], env=node.env, cwd=self.base, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **self._as_user)

    def _pg_autoctl(self, node: Node, *args: str, deadline: float) -> str:
        """Run a pg_autoctl command to its end (its own process group, killed on timeout)."""
        with tempfile.TemporaryFile() as out:
            process = self._popen(node, list(args), out)
            try:
                code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                code = None
            out.seek(0)
            text = out.read().decode("utf-8", "replace")
        with node.run_log.open("a") as log:
            log.write(f"\n$ pg_autoctl {' '.join(args)}\n{text}")
        if code != 0:
            what = "timed out" if code is None else f"exited with {code}"
            raise HAClusterError(f"pg_autoctl {' '.join(args)} {what} for {node.name}:\n"
                                 f"{chr(10).join(text.splitlines()[-40:])}\n{self._more_logs([node])}")
        return text

    def _spawn_run(self, node: Node) -> None:
        with node.run_log.open("ab") as log:
            log.write(f"\n$ pg_autoctl run  (started {time.strftime('%H:%M:%S')})\n".encode())
            log.flush()
            node.process = self._popen(node, ["run", "--pgdata", str(node.pgdata)], log)

    def _connect(self, node: Node, database: str = "postgres", timeout: float = 3,
                 **kwargs: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(host=HOST, port=node.port, user=self.user, dbname=database,
                               connect_timeout=max(1, int(timeout)), autocommit=True, **kwargs)

    def _monitor_ready(self) -> bool | None:
        assert self.monitor is not None
        with self._connect(self.monitor, "pg_auto_failover") as conn:
            row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgautofailover'").fetchone()
        return True if row else None

    def _reported(self, node: Node, state: str) -> bool | None:
        for row in self.state():
            if row["nodename"] == node.name:
                node.node_id = row["nodeid"]
                return True if row["reported"] == state and row["goal"] == state else None
        return None

    def _writable(self, node: Node) -> bool:
        """The node is out of recovery and acknowledges a committed transaction (a sync-rep wait
        cut short by statement_timeout is a warning, not an acknowledgement: it counts as no)."""
        notices: list[str] = []
        try:
            with self._connect(node, timeout=2, options="-c statement_timeout=3000") as conn:
                conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
                if row is None or row[0]:
                    return False
                conn.execute("SELECT txid_current()")
        except psycopg.Error:
            return False
        return not any("synchronous replication" in n for n in notices)

    def _replicating(self, synchronous: bool) -> tuple[Node, Node] | None:
        rows = {r["nodename"]: r for r in self.state()}
        primary = next((self.node(n) for n, r in rows.items() if r["reported"] == r["goal"] == "primary"), None)
        standby = next((self.node(n) for n, r in rows.items() if r["reported"] == r["goal"] == "secondary"), None)
        if primary is None or standby is None:
            return None
        with self._connect(primary) as conn:
            names = conn.execute("SELECT current_setting('synchronous_standby_names')").fetchone()
            states = conn.execute("SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'").fetchall()
        if not states or names is None:
            return None
        if synchronous:
            ok = bool(names[0]) and states[0][0] in ("sync", "quorum")
        else:
            ok = names[0] == "" and states[0][0] == "async"
        return (primary, standby) if ok else None

    def _last_event_id(self) -> int:
        assert self.monitor is not None
        with self._connect(self.monitor, "pg_auto_failover") as conn:
            row = conn.execute("SELECT coalesce(max(eventid), 0) FROM pgautofailover.event").fetchone()
        return int(row[0]) if row else 0

    def _events_since(self, event_id: int) -> list[tuple[str, str, str, str]]:
        """(time, node, goal state, description) of the monitor's events after ``event_id``."""
        assert self.monitor is not None
        with self._connect(self.monitor, "pg_auto_failover") as conn:
            rows = conn.execute("SELECT to_char(eventtime, 'HH24:MI:SS.MS'), nodename, goalstate::text, description"
                                " FROM pgautofailover.event WHERE eventid > %s ORDER BY eventid",
                                (event_id,)).fetchall()
        return [(str(a), str(b), str(c), str(d)) for a, b, c, d in rows]

    def _recover(self, old: Node | None, timeout: float, rejoin: bool, require_failover: bool) -> Recovery:
        kill = self.last_kill
        if old is None:
            if kill is None:
                raise HAClusterError("wait_recovered: nothing was killed (call kill_primary first)")
            old = kill.node
        if kill is None or kill.node.name != old.name:  # the caller killed it another way
            kill = Kill(old, time.time(), time.monotonic(), (0, 0), [], False, self._last_event_id())
        other = self.other(old)
        deadline = kill.monotonic + timeout
        old_back_since: list[float] = []

        def promoted() -> bool:
            return any(node == other.name and goal in PROMOTION_GOALS
                       for _, node, goal, _ in self._events_since(kill.last_event_id))

        def recovered() -> str | None:
            if self._writable(other) and self.primary().name == other.name:
                return "failover"
            if old.postmaster_pid() and self._writable(old):
                if promoted():  # the failover is under way: the old primary is about to be demoted
                    old_back_since.clear()
                    return None
                # Its keeper reports every second or so: past two reports with postgres up and no
                # promotion, the monitor will not promote (IsUnhealthy needs a report of it down).
                old_back_since[:1] = old_back_since[:1] or [time.monotonic()]
                if time.monotonic() - old_back_since[0] > 3:
                    return "restart"
            return None
        outcome = self._wait(f"a writable primary after killing {old.name}", recovered, deadline, [old, other])
        # A restart is only known once the old primary has stayed up a while: it was writable from the first probe.
        writable_after = (old_back_since[0] if outcome == "restart" else time.monotonic()) - kill.monotonic
        events = [f"{t} {n} -> {g}: {d}" for t, n, g, d in self._events_since(kill.last_event_id)]
        if outcome == "restart" and require_failover:
            raise NoFailoverError(f"no failover: pg_autoctl restarted postgres on {old.name} and it took writes "
                                  f"again {writable_after:.1f} s after the kill, with no promotion of {other.name}. "
                                  f"Monitor: {self.describe()}\nEvents:\n" + "\n".join(events))
        rejoined_after = None
        if rejoin:
            if outcome == "failover" and not old.keeper_alive():
                _wait_gone([kill.postmaster, *kill.children], 15)
                self._spawn_run(old)
            if outcome == "failover":
                self._wait(f"{old.name} a secondary again", lambda: self._reported(old, "secondary"), deadline,
                           [old, other])
            self.wait_healthy(timeout=max(1.0, deadline - time.monotonic()))
            rejoined_after = time.monotonic() - kill.monotonic
            events = [f"{t} {n} -> {g}: {d}" for t, n, g, d in self._events_since(kill.last_event_id)]
        new = other.name if outcome == "failover" else old.name
        result = Recovery(outcome, old.name, new, kill.wall, writable_after, rejoined_after, events)
        self._say(str(result))
        return result

    def _check_faketime(self) -> None:
        assert self.standby_faketime is not None
        expected = parse_offset(self.standby_faketime)
        offsets = self.clock_offsets()
        self.clock_check = offsets
        for node in self.nodes:
            want = expected if node.faketime else 0.0
            if abs(offsets[node.name] - want) > 1.0:
                raise HAClusterError(f"libfaketime offset not in effect: {node.name}'s now() is "
                                     f"{offsets[node.name]:+.2f} s from ours, expected {want:+.1f} s\n"
                                     + self.logs(node))
        self._say("clock offsets (SELECT now() minus our clock): "
                  + ", ".join(f"{n} {o:+.2f} s" for n, o in offsets.items())
                  + f"; {self.nodes[1].name} runs under FAKETIME={self.standby_faketime}")

    def _more_logs(self, nodes: list[Node], lines: int = 30) -> str:
        return "\n".join(self.logs(node, lines) for node in nodes)

    def _wait(self, what: str, probe: Callable[[], T | None], deadline: float, nodes: list[Node]) -> T:
        """Poll ``probe`` until it returns something not None (exceptions count as not yet)."""
        began = time.monotonic()
        last_error = ""
        while True:
            try:
                value = probe()
                if value is not None:
                    return value
            except Exception as exc:
                last_error = f"{type(exc).__name__}: {exc}".strip()
            if time.monotonic() >= deadline:
                state = self.describe()
                raise HAClusterError(f"timed out after {time.monotonic() - began:.1f} s waiting for {what}"
                                     f"{'; last error: ' + last_error if last_error else ''}\n"
                                     f"monitor: {state}\n{self._more_logs([*nodes])}")
            time.sleep(0.2)

