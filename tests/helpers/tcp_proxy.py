"""A small threaded TCP proxy on 127.0.0.1 between node processes and a database server,
controlled by the test: the database connection faults of the fault suite.

    proxy = TcpProxy(("127.0.0.1", 5432), "postgresql")
    url = proxy.url(database_url)            # nodes connect through the proxy
    proxy.hold(); ...; proxy.release()       # delay: traffic waits, then flows again
    proxy.hang()                             # accept, never forward (until cut()/release())
    proxy.cut()                              # close every open connection at once
    proxy.refuse() / proxy.release()         # down: cut, and close new connections at once
    done = proxy.drop_reply_to_next_commit(lambda statements: ...)
    proxy.close()

Holding means the proxy stops reading: the bytes wait in the kernel's socket buffers and flow
on, in order, once released, as over a link that stalled.

"Drop the reply to the next COMMIT" is the ambiguous case: the client's COMMIT is forwarded,
the server commits and answers, and the proxy swallows that answer and closes both sides, so
the client cannot know whether its transaction committed. To target one transaction, the
proxy reads the client's statements from the wire protocol: PostgreSQL simple Query ('Q')
messages and Bind ('B') of a statement given by Parse ('P'), also a prepared one that is
bound again later (psycopg sends COMMIT as a simple Query; SSL/GSS requests are answered 'N'
by the proxy so the stream stays readable), MySQL ``COM_QUERY`` packets (PyMySQL
sends COMMIT as one). The predicate sees the statements of the transaction that COMMIT ends.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.engine import make_url

Statements = list[str]
_PG_SSL_REQUEST, _PG_GSS_REQUEST, _PG_PROTOCOL_3 = 80877103, 80877104, 196608
_MYSQL_COM_QUERY = 0x03
_CHUNK = 65536
_POLL_S = 0.05


@dataclass
class _Commit:
    """A COMMIT seen on the wire, for tests that check the proxy's reading of the protocol."""

    connection: int
    message: str  # "Q" / "B" (PostgreSQL) or "COM_QUERY" (MySQL)
    statements: Statements
    dropped: bool


@dataclass
class _Trap:
    """An armed "drop the reply to the next matching COMMIT"."""

    matches: Callable[[Statements], bool]
    sprung: threading.Event = field(default_factory=threading.Event)


class _Reader:
    """Splits a client's byte stream into protocol messages, and says which are statements."""

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self.buffer = b""
        self.started = protocol != "postgresql"  # PostgreSQL: untyped start-up messages first
        self.prepared: dict[bytes, str] = {}  # PostgreSQL statement name -> text (b"" = unnamed)

    def feed(self, data: bytes) -> list[bytes]:
        self.buffer += data
        messages = []
        while (size := self._next_size()) is not None and len(self.buffer) >= size:
            messages.append(self.buffer[:size])
            self.buffer = self.buffer[size:]
        return messages

    def _next_size(self) -> int | None:
        if self.protocol == "mysql":
            return None if len(self.buffer) < 4 else 4 + int.from_bytes(self.buffer[:3], "little")
        if not self.started:
            return None if len(self.buffer) < 4 else struct.unpack("!I", self.buffer[:4])[0]
        return None if len(self.buffer) < 5 else 1 + struct.unpack("!I", self.buffer[1:5])[0]

    def startup_code(self, message: bytes) -> int | None:
        """PostgreSQL start-up phase: the request code of an untyped message (None once typed)."""
        if self.started:
            return None
        code: int = struct.unpack("!I", message[4:8])[0]
        if code not in (_PG_SSL_REQUEST, _PG_GSS_REQUEST):
            self.started = True
        return code

    def statement(self, message: bytes) -> tuple[str, str] | None:
        """(message kind, SQL text) of a statement message, else None."""
        if self.protocol == "mysql":
            if len(message) > 4 and message[4] == _MYSQL_COM_QUERY:
                return "COM_QUERY", message[5:].decode("utf-8", "replace")
            return None
        kind, body = chr(message[0]), message[5:]
        if kind == "Q":
            return "Q", body.rstrip(b"\0").decode("utf-8", "replace")
        parts = body.split(b"\0", 2)
        if kind == "P" and len(parts) > 1:  # Parse: statement name, query text, ...
            self.prepared[parts[0]] = parts[1].decode("utf-8", "replace")
        if kind == "B" and len(parts) > 1:  # Bind: portal, statement name, ... -- the execution
            return "B", self.prepared.get(parts[1], "")
        return None


class _Link:
    """One proxied connection: client socket, server socket and two pumping threads."""

    def __init__(self, proxy: TcpProxy, number: int, client: socket.socket, server: socket.socket) -> None:
        self.proxy, self.number, self.client, self.server = proxy, number, client, server
        self.reader = _Reader(proxy.protocol)
        self.statements: Statements = []
        self.swallow_reply = False
        self.trap: _Trap | None = None
        self.closed = threading.Event()
        self._threads = [threading.Thread(target=self._pump, args=(client, self._from_client), daemon=True,
                                          name=f"tcp-proxy-{number}-up"),
                         threading.Thread(target=self._pump, args=(server, self._from_server), daemon=True,
                                          name=f"tcp-proxy-{number}-down")]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _pump(self, source: socket.socket, handle: Callable[[bytes], None]) -> None:
        try:
            while not self.closed.is_set():
                if not self.proxy.flowing.wait(_POLL_S):
                    continue  # held: leave the bytes in the kernel's buffers
                readable, _, _ = select.select([source], [], [], _POLL_S)
                if not readable:
                    continue
                data = source.recv(_CHUNK)
                if not data:
                    break
                handle(data)
        except (OSError, ValueError):  # ValueError: the other direction closed the socket (fd -1)
            pass
        finally:
            self.close()

    def _from_client(self, data: bytes) -> None:
        for message in self.reader.feed(data):
            code = self.reader.startup_code(message)
            if code in (_PG_SSL_REQUEST, _PG_GSS_REQUEST):
                self.client.sendall(b"N")  # no encryption: keep the stream readable
                continue
            self._inspect(message)
            self.server.sendall(message)

    def _inspect(self, message: bytes) -> None:
        found = self.reader.statement(message)
        if found is None:
            return
        kind, text = found
        verb = text.strip().rstrip(";").strip().upper()
        if verb in ("COMMIT", "ROLLBACK"):
            if verb == "COMMIT":
                self.trap = self.proxy._spring(self.statements)
                self.swallow_reply = self.trap is not None
                self.proxy.commits.append(_Commit(self.number, kind, self.statements, self.swallow_reply))
            self.statements = []
        elif verb != "BEGIN":
            self.statements.append(text)

    def _from_server(self, data: bytes) -> None:
        if self.swallow_reply:  # the server answered the COMMIT: nobody will hear it
            if self.trap is not None:
                self.trap.sprung.set()
            self.close()
            return
        self.client.sendall(data)


class TcpProxy:
    """Listens on 127.0.0.1 (a free port) and forwards to ``target``; see the module doc."""

    def __init__(self, target: tuple[str, int], protocol: str) -> None:
        if protocol not in ("postgresql", "mysql"):
            raise ValueError(f"protocol must be postgresql or mysql (got {protocol!r})")
        self.target, self.protocol = target, protocol
        self.flowing = threading.Event()
        self.flowing.set()
        self.refusing = False
        self.refused = 0  # connections closed at once while refusing
        self.commits: list[_Commit] = []
        self._links: list[_Link] = []
        self._traps: list[_Trap] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer: threading.Timer | None = None
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(_POLL_S)
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept, name="tcp-proxy-accept", daemon=True)
        self._acceptor.start()

    @classmethod
    def for_url(cls, url: str) -> TcpProxy:
        parsed = make_url(url)
        protocol = "postgresql" if parsed.get_backend_name().startswith("postgres") else "mysql"
        return cls((parsed.host or "127.0.0.1", parsed.port or (5432 if protocol == "postgresql" else 3306)),
                   protocol)

    def url(self, url: str) -> str:
        """``url`` pointed at the proxy instead of the server."""
        return make_url(url).set(host="127.0.0.1", port=self.port).render_as_string(hide_password=False)

    # --- control ----------------------------------------------------------------------------

    def hold(self) -> None:
        """Stop forwarding in both directions; new connections are accepted and wait too."""
        self._cancel_timer()
        self.flowing.clear()

    hang = hold  # accept, never forward: a hang is a hold nobody releases (end it with cut())

    def delay(self, seconds: float) -> None:
        """Hold all traffic for ``seconds``, then let it flow on."""
        self.hold()
        self._timer = threading.Timer(seconds, self.release)
        self._timer.daemon = True
        self._timer.start()

    def release(self) -> None:
        """Back to passing traffic (held bytes flow on; new connections are served)."""
        self._cancel_timer()
        self.refusing = False
        self.flowing.set()

    def cut(self) -> None:
        """Close every open connection, both sides, at once."""
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()

    def refuse(self) -> None:
        """Down: cut every connection and close new ones as soon as they arrive."""
        self.refusing = True
        self.cut()

    def drop_reply_to_next_commit(self, matches: Callable[[Statements], bool] | None = None) -> threading.Event:
        """Arm the lost acknowledgement for the next COMMIT whose transaction ``matches``;
        the returned event is set once a reply was swallowed."""
        trap = _Trap(matches or (lambda statements: True))
        with self._lock:
            self._traps.append(trap)
        return trap.sprung

    def close(self) -> None:
        self._stop.set()
        self._cancel_timer()
        self.flowing.set()
        self._acceptor.join(timeout=2)
        self._listener.close()
        self.cut()

    # --- plumbing ---------------------------------------------------------------------------

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _spring(self, statements: Statements) -> _Trap | None:
        with self._lock:
            for trap in self._traps:
                if trap.matches(statements):
                    self._traps.remove(trap)
                    return trap
        return None

    def _accept(self) -> None:
        number = 0
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            if self.refusing:
                self.refused += 1
                client.close()
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            for sock in (client, server):
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            number += 1
            link = _Link(self, number, client, server)
            with self._lock:
                self._links = [known for known in self._links if not known.closed.is_set()]
                self._links.append(link)
            link.start()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
