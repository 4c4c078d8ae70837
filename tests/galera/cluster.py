"""A real MariaDB Galera Cluster for tests: three ``mariadbd`` processes from Debian's packages.

Each node has its own data directory (``mariadb-install-db``), client port, Galera group port, IST
port and SST port on 127.0.0.1, under one temporary directory, run as the ``mysql`` OS user when
this process is root. The first node bootstraps the cluster (``--wsrep-new-cluster``); the others
join it by state transfer (rsync). No pytest in here: ``bench/`` can use it.

    cluster = GaleraCluster().start()
    try:
        urls = [cluster.url(i) for i in range(3)]    # one scheduler node per Galera node
        cluster.kill(1)                              # SIGKILL: the node is gone
        cluster.wait_size(2)
        cluster.restart(1)                           # rejoins through state transfer
        cluster.isolate(2); cluster.reconnect(2)     # a partition: node 3 loses quorum, then rejoins
    finally:
        cluster.stop()

Every wait has a deadline and raises :class:`GaleraError` with the tail of the node's error log.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql  # type: ignore[import-untyped]

HOST = "127.0.0.1"
MARIADBD = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
INSTALL_DB = shutil.which("mariadb-install-db") or "/usr/bin/mariadb-install-db"
PROVIDER = "/usr/lib/galera/libgalera_smm.so"


class GaleraError(RuntimeError):
    """The cluster did not reach the state a test waited for."""


def unavailable_reason() -> str | None:
    """Why this machine cannot start a Galera cluster (None: it can)."""
    for path, package in ((MARIADBD, "mariadb-server"), (INSTALL_DB, "mariadb-server"), (PROVIDER, "galera-4")):
        if not Path(path).exists():
            return f"{path} is missing (apt-get install {package})"
    if shutil.which("rsync") is None:
        return "rsync is missing (apt-get install rsync): the joining nodes' state transfer needs it"
    return None


def faketime_library() -> str | None:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1")) + sorted(
        glob.glob("/usr/lib/faketime/libfaketime.so.1"))
    return found[0] if found else None


def _free_ports(count: int) -> list[int]:
    ports: list[int] = []
    sockets = []
    try:
        while len(ports) < count:
            sock = socket.socket()
            sock.bind((HOST, 0))
            sockets.append(sock)
            ports.append(sock.getsockname()[1])
    finally:
        for sock in sockets:
            sock.close()
    return ports


@dataclass
class GaleraNode:
    index: int
    datadir: Path
    port: int  # the SQL port
    group_port: int  # gcomm (gmcast.listen_addr)
    ist_port: int
    sst_port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return f"galera{self.index + 1}"

    @property
    def log(self) -> Path:
        return self.datadir.parent / f"{self.name}.err"

    def log_tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return "(no log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


class GaleraCluster:
    """``size`` Galera nodes on free local ports (see the module doc)."""

    def __init__(self, size: int = 3, workdir: Path | None = None, verbose: bool = False, wsrep: bool = True) -> None:
        if size < 1:
            raise ValueError("size: at least one node")
        if not wsrep and size != 1:
            raise ValueError("size: one server without wsrep (the plain server a cluster is compared with)")
        self.size = size
        self.wsrep = wsrep  # False: one plain server with the same settings (bench/galera.py compares)
        self.verbose = verbose
        self._own_dir = workdir is None
        self.root = workdir or Path(tempfile.mkdtemp(prefix="hai-galera-"))
        ports = _free_ports(4 * size)
        self.nodes = [GaleraNode(i, self.root / f"galera{i + 1}" / "data", port=ports[4 * i],
                                 group_port=ports[4 * i + 1], ist_port=ports[4 * i + 2], sst_port=ports[4 * i + 3])
                      for i in range(size)]

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> GaleraCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 180) -> GaleraCluster:
        began = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        for node in self.nodes:
            self._install(node)
        try:
            self._launch(self.nodes[0], bootstrap=True)
            if not self.wsrep:
                self._wait(f"{self.nodes[0].name} up", lambda: self._answers(0), timeout, self.nodes[0])
                with self.connect(0) as conn, conn.cursor() as cursor:
                    cursor.execute("CREATE DATABASE IF NOT EXISTS test")
                return self
            self.wait_synced(0, timeout)
            with self.connect(0) as conn, conn.cursor() as cursor:
                cursor.execute("CREATE DATABASE IF NOT EXISTS test")
            for node in self.nodes[1:]:
                self._launch(node, bootstrap=False)
                self.wait_synced(node.index, timeout)
            self.wait_size(self.size, timeout)
        except BaseException:
            self.stop()
            raise
        self._say(f"galera cluster of {self.size} up in {time.monotonic() - began:.1f} s: "
                  + ", ".join(f"{n.name} {HOST}:{n.port}" for n in self.nodes))
        return self

    def stop(self) -> None:
        for node in self.nodes:
            self._terminate(node)
        if self._own_dir:
            shutil.rmtree(self.root, ignore_errors=True)

    def kill(self, index: int) -> None:
        """SIGKILL the node's server (a machine gone)."""
        node = self.nodes[index]
        if node.process is not None and node.process.poll() is None:
            node.process.send_signal(signal.SIGKILL)
            node.process.wait(timeout=30)
        node.process = None

    def shut_down(self, index: int) -> None:
        """SIGTERM: the node leaves the cluster cleanly."""
        self._terminate(self.nodes[index])

    def restart(self, index: int, timeout: float = 180, faketime: str | None = None) -> None:
        """Start a stopped node again: it rejoins the running cluster (IST or SST).

        ``faketime``: a libfaketime offset ("+5s") for its wall clock (``NOW()``), as a machine
        whose clock is set wrong; None runs it on this host's clock."""
        node = self.nodes[index]
        if node.process is not None and node.process.poll() is None:
            raise GaleraError(f"{node.name} is running")
        self._launch(node, bootstrap=False, faketime=faketime)
        self.wait_synced(index, timeout)

    def isolate(self, index: int) -> None:
        """Cut the node off from the group (``gmcast.isolate``), as a network partition would:
        it loses quorum and refuses queries (1047) while the others go on as a cluster of two."""
        self._provider_option(index, "gmcast.isolate=1")

    def reconnect(self, index: int, timeout: float = 120) -> None:
        """End :meth:`isolate`: the node rejoins (IST) and is synced again."""
        self._provider_option(index, "gmcast.isolate=0")
        self.wait_synced(index, timeout)
        self.wait_size(self.size, timeout, via=index)

    def db_clock_offset_s(self, index: int) -> float:
        """The node's ``NOW(6)`` minus this host's clock (seconds)."""
        with self.connect(index) as conn, conn.cursor() as cursor:
            before = time.time()
            cursor.execute("SELECT UNIX_TIMESTAMP(NOW(6))")
            (value,) = cursor.fetchone()
            return float(value) - (before + time.time()) / 2

    # --- reading ----------------------------------------------------------------------------

    def url(self, index: int, database: str = "test") -> str:
        return f"mysql://root@{HOST}:{self.nodes[index].port}/{database}"

    def connect(self, index: int, database: str | None = None, timeout: float = 3) -> Any:
        return pymysql.connect(host=HOST, port=self.nodes[index].port, user="root", database=database,
                               connect_timeout=max(1, int(timeout)), autocommit=True)

    def status(self, index: int) -> dict[str, str]:
        """The node's ``wsrep_%`` status variables."""
        with self.connect(index) as conn, conn.cursor() as cursor:
            cursor.execute("SHOW GLOBAL STATUS LIKE 'wsrep_%'")
            return {str(k): str(v) for k, v in cursor.fetchall()}

    def wait_synced(self, index: int, timeout: float = 180) -> dict[str, str]:
        node = self.nodes[index]

        def synced() -> dict[str, str] | None:
            if node.process is not None and node.process.poll() is not None:
                raise GaleraError(f"{node.name} exited ({node.process.returncode}):\n{node.log_tail()}")
            try:
                found = self.status(index)
            except pymysql.MySQLError:
                return None
            ready = found.get("wsrep_ready") == "ON" and found.get("wsrep_local_state_comment") == "Synced"
            return found if ready else None

        return self._wait(f"{node.name} synced", synced, timeout, node)

    def wait_size(self, size: int, timeout: float = 60, via: int | None = None) -> None:
        """Until a running node (``via``, or the first running one) sees ``size`` members."""
        def members() -> bool:
            for node in self.nodes if via is None else [self.nodes[via]]:
                if node.process is None or node.process.poll() is not None:
                    continue
                with contextlib.suppress(pymysql.MySQLError):
                    return self.status(node.index).get("wsrep_cluster_size") == str(size)
            return False

        self._wait(f"a cluster of {size}", members, timeout)

    # --- inside ---------------------------------------------------------------------------

    def _install(self, node: GaleraNode) -> None:
        node.datadir.mkdir(parents=True, exist_ok=True)
        self._own(node.datadir.parent)
        done = subprocess.run(
            [INSTALL_DB, f"--datadir={node.datadir}", "--auth-root-authentication-method=normal",
             "--skip-test-db", "--skip-name-resolve", *self._user_args()],
            capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise GaleraError(f"mariadb-install-db for {node.name} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")

    def _answers(self, index: int) -> bool:
        try:
            with self.connect(index):
                return True
        except pymysql.MySQLError:
            return False

    def _options(self, node: GaleraNode) -> list[str]:
        members = ",".join(f"{HOST}:{n.group_port}" for n in self.nodes)
        base = node.datadir.parent
        wsrep = [
            "--wsrep-on=ON", f"--wsrep-provider={PROVIDER}", "--wsrep-cluster-name=hai-galera",
            f"--wsrep-cluster-address=gcomm://{members}", f"--wsrep-node-name={node.name}",
            f"--wsrep-node-address={HOST}:{node.group_port}",
            f"--wsrep-provider-options=gmcast.listen_addr=tcp://{HOST}:{node.group_port};"
            f"ist.recv_addr={HOST}:{node.ist_port};gcache.size=64M",
            f"--wsrep-sst-receive-address={HOST}:{node.sst_port}", "--wsrep-sst-method=rsync",
        ] if self.wsrep else []
        return [
            "--no-defaults", f"--datadir={node.datadir}", f"--port={node.port}", f"--bind-address={HOST}",
            f"--socket={base / 'mysqld.sock'}", f"--pid-file={base / 'mysqld.pid'}", f"--log-error={node.log}",
            "--skip-name-resolve", "--innodb-buffer-pool-size=64M", "--innodb-log-file-size=32M",
            "--max-connections=300", "--innodb-flush-log-at-trx-commit=2",
            "--binlog-format=ROW", "--default-storage-engine=InnoDB", "--innodb-autoinc-lock-mode=2",
            *wsrep, *self._user_args(),
        ]

    def _launch(self, node: GaleraNode, bootstrap: bool, faketime: str | None = None) -> None:
        args = [MARIADBD, *self._options(node)]
        if bootstrap and self.wsrep:
            args.append("--wsrep-new-cluster")
        env = None
        if faketime is not None:
            library = faketime_library()
            if library is None:
                raise GaleraError("libfaketime is missing (apt-get install faketime)")
            # Only the wall clock moves (as a machine's clock set wrong does), not the timers.
            env = {**os.environ, "LD_PRELOAD": library, "FAKETIME": faketime, "DONT_FAKE_MONOTONIC": "1"}
        node.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True, env=env)

    def _provider_option(self, index: int, option: str) -> None:
        with self.connect(index) as conn, conn.cursor() as cursor:
            cursor.execute("SET GLOBAL wsrep_provider_options = %s", (option,))

    def _terminate(self, node: GaleraNode) -> None:
        process, node.process = node.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)

    def _user_args(self) -> list[str]:
        return ["--user=mysql"] if os.geteuid() == 0 else []

    def _own(self, path: Path) -> None:
        if os.geteuid() != 0:
            return
        user = pwd.getpwnam("mysql")
        for where in (self.root, path, *path.rglob("*")):
            os.chown(where, user.pw_uid, user.pw_gid)

    def _wait(self, what: str, probe: Any, timeout: float, node: GaleraNode | None = None) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            found = probe()
            if found:
                return found
            if time.monotonic() > deadline:
                tail = node.log_tail() if node is not None else "\n".join(n.log_tail(10) for n in self.nodes)
                raise GaleraError(f"{what}: not within {timeout:.0f} s\n{tail}")
            time.sleep(0.2)

    def _say(self, text: str) -> None:
        if self.verbose:
            print(f"[galera] {text}", flush=True)
