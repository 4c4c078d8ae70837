"""Watched HTTP connections: every socket is handed to a :class:`Watch` before it connects, so a
watchdog can shut it down at once wherever the request is blocked (connect, send, or a body that
trickles in one byte a second).

A connection is marked *established* once it is up (after the TLS handshake for HTTPS): that is
the line between "nothing was sent" and "the request may have reached the server".
"""

from __future__ import annotations

import socket
import sys
import threading
from typing import Any

from requests.adapters import HTTPAdapter
from urllib3 import HTTPConnectionPool, HTTPSConnectionPool, PoolManager
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util.connection import allowed_gai_family

from scheduler_core.transport.deadline import StopCause, shutdown_socket


class StoppedError(OSError):
    """Raised in the working thread when it tries to go on after the watchdog stopped the exchange."""


class Watch:
    """What the working thread and the watchdog share about one exchange: its sockets and how it ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._finished = False
        self.stopped_by: StopCause | None = None
        self.established = False  # a connection is up: from now on the request may reach the server
        self.settled = threading.Event()  # set by finish or by a stop that took effect

    def adopt(self, sock: socket.socket, established: bool = False) -> None:
        """Register a socket before it connects (or, ``established``, once it is ready to send)."""
        with self._lock:
            if self.stopped_by is not None:
                raise StoppedError("the exchange was stopped")
            self._sockets.append(sock)
            self.established = self.established or established

    def stop(self, cause: StopCause) -> None:
        """Shut the sockets down, unless the working thread finished first (then nothing changes)."""
        with self._lock:
            if self._finished or self.stopped_by is not None:
                return
            self.stopped_by = cause
            for sock in self._sockets:
                shutdown_socket(sock)
            self.settled.set()

    def finish(self) -> None:
        """The working thread is done with the network: from now on ``stop`` does nothing."""
        with self._lock:
            self._finished = True
            self.settled.set()


def _connect_socket(conn: HTTPConnection, watch: Watch) -> socket.socket:
    """``urllib3.util.connection.create_connection``, handing each socket to the watch before connecting."""
    host = conn._dns_host.strip("[]")
    error: OSError = OSError(f"no address found for {conn.host}")
    for family, kind, proto, _name, address in socket.getaddrinfo(host, conn.port, allowed_gai_family(),
                                                                    socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            watch.adopt(sock)
            for option in conn.socket_options or ():
                sock.setsockopt(*option)
            sock.settimeout(conn.timeout if isinstance(conn.timeout, float | int) else None)
            if conn.source_address:
                sock.bind(conn.source_address)
            sock.connect(address)
            return sock
        except OSError as exc:
            error = exc
            sock.close()
    raise error


def _new_watched_conn(conn: HTTPConnection, watch: Watch) -> socket.socket:
    """Open the socket, raising what urllib3's own ``_new_conn`` raises (so requests maps it the same)."""
    try:
        sock = _connect_socket(conn, watch)
    except socket.gaierror as exc:
        raise NameResolutionError(conn.host, conn, exc) from exc
    except TimeoutError as exc:
        raise ConnectTimeoutError(conn, f"Connection to {conn.host} timed out") from exc
    except OSError as exc:
        raise NewConnectionError(conn, f"Failed to establish a new connection: {exc}") from exc
    sys.audit("http.client.connect", conn, conn.host, conn.port)
    return sock


class _Watched:
    """Mixed into urllib3's connection classes: every socket is handed to the watch, before it
    connects and again once the connection is up (for HTTPS, after the TLS handshake: the
    wrapped socket is a new object)."""

    sock: socket.socket | None

    def __init__(self, *args: Any, watch: Watch, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.watch = watch

    def _new_conn(self) -> socket.socket:
        return _new_watched_conn(self, self.watch)  # type: ignore[arg-type]

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        assert self.sock is not None
        self.watch.adopt(self.sock, established=True)


class WatchedHTTPConnection(_Watched, HTTPConnection):
    pass


class WatchedHTTPSConnection(_Watched, HTTPSConnection):
    pass


class WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = WatchedHTTPConnection


class WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = WatchedHTTPSConnection


class WatchedPoolManager(PoolManager):
    def __init__(self, watch: Watch, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.watch = watch
        self.pool_classes_by_scheme = {"http": WatchedHTTPPool, "https": WatchedHTTPSPool}

    def _new_pool(self, scheme: str, host: str, port: int,
                  request_context: dict[str, Any] | None = None) -> HTTPConnectionPool:
        pool = super()._new_pool(scheme, host, port, request_context)
        # Not through connection_pool_kw: every key there must be a field of urllib3's PoolKey.
        pool.conn_kw["watch"] = self.watch
        return pool


class WatchedAdapter(HTTPAdapter):
    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        super().__init__(pool_connections=1, pool_maxsize=1)

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager = WatchedPoolManager(self.watch, num_pools=connections, maxsize=maxsize, block=block,
                                               **pool_kwargs)
