"""A TCP proxy (on 127.0.0.1, or ``listen_host``) that delays every byte by a fixed one-way latency in each direction:
a database "far away" for bench/far_db.py.

Each direction of each connection has a reader, which stamps every chunk it receives with the
time it may leave, and a writer, which sends the chunks in order once their time has come. So
a request and its answer cross a round trip of ``2 * one_way_ms`` on top of the loopback's own,
with no bandwidth limit and no reordering: the shape of a LAN or cross-zone link, which is what
``tc netem delay`` would give on a kernel that has the netem qdisc (this machine's does not).

    with DelayProxy(("127.0.0.1", 5432), one_way_ms=5) as proxy:
        url = proxy.url("postgresql://postgres@127.0.0.1:5432/bench")   # 10 ms round trip
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from typing import Any

from sqlalchemy.engine import make_url

_CHUNK = 65536


class DelayProxy:
    def __init__(self, target: tuple[str, int], one_way_ms: float, listen_host: str = "127.0.0.1") -> None:
        self.target, self.delay_s, self.host = target, one_way_ms / 1000, listen_host
        self._listener = socket.create_server((listen_host, 0))
        self.port = int(self._listener.getsockname()[1])
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="delay-proxy-accept", daemon=True).start()

    def url(self, database_url: str) -> str:
        """``database_url`` with its host and port replaced by the proxy's."""
        return make_url(database_url).set(host=self.host, port=self.port).render_as_string(hide_password=False)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                chunks: queue.Queue[tuple[float, bytes]] = queue.Queue()
                threading.Thread(target=self._read, args=(source, chunks), daemon=True).start()
                threading.Thread(target=self._write, args=(sink, chunks), daemon=True).start()

    def _read(self, source: socket.socket, chunks: queue.Queue[tuple[float, bytes]]) -> None:
        while True:
            try:
                data = source.recv(_CHUNK)
            except OSError:
                data = b""
            chunks.put((time.monotonic() + self.delay_s, data))
            if not data:
                return

    @staticmethod
    def _write(sink: socket.socket, chunks: queue.Queue[tuple[float, bytes]]) -> None:
        while True:
            due, data = chunks.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                if not data:
                    sink.shutdown(socket.SHUT_WR)
                    return
                sink.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def __enter__(self) -> DelayProxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
