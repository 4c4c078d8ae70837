"""The TCP proxy of the network faults, against the real servers: it passes traffic, reads
COMMIT off the wire the way the drivers really send it (the capture), swallows the reply to a
chosen COMMIT after the server committed, holds, cuts and refuses."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from scheduler_core.db import close_engine, create_engine
from tests.conftest import TestDatabase
from tests.helpers.tcp_proxy import TcpProxy


@pytest.fixture
def proxied(server_database: TestDatabase) -> Iterator[tuple[TcpProxy, Engine, Engine]]:
    """(proxy, engine through the proxy, engine straight to the server) with a ``probe`` table."""
    proxy = TcpProxy.for_url(server_database.url)
    direct = create_engine(server_database.url)
    with direct.begin() as conn:
        conn.execute(text("CREATE TABLE probe (id INTEGER PRIMARY KEY, note VARCHAR(40))"))
    through = create_engine({"url": proxy.url(server_database.url), "connect_timeout_ms": 3000})
    try:
        yield proxy, through, direct
    finally:
        proxy.close()
        close_engine(through)
        close_engine(direct)


def _count(engine: Engine) -> int:
    with engine.connect() as conn:
        value = int(conn.execute(text("SELECT count(*) FROM probe")).scalar_one())
        conn.rollback()
    return value


def test_commit_is_read_off_the_wire_as_the_driver_sends_it(proxied: tuple[TcpProxy, Engine, Engine]) -> None:
    proxy, through, direct = proxied
    for number in range(7):  # psycopg prepares a statement run 5 times: later runs only Bind it by name
        with through.begin() as conn:
            conn.execute(text("INSERT INTO probe (id, note) VALUES (:id, 'captured')"), {"id": number})
    assert _count(direct) == 7
    inserts = [c for c in proxy.commits if any("INSERT INTO probe" in s for s in c.statements)]
    assert len(inserts) == 7, [(c.message, c.statements) for c in proxy.commits]
    # psycopg: COMMIT is a simple Query message; PyMySQL: a COM_QUERY packet.
    assert {c.message for c in inserts} <= {"Q", "COM_QUERY"}
    assert not any(c.dropped for c in proxy.commits)


def test_the_reply_to_a_chosen_commit_is_lost_after_the_server_committed(
        proxied: tuple[TcpProxy, Engine, Engine]) -> None:
    proxy, through, direct = proxied
    sprung = proxy.drop_reply_to_next_commit(lambda statements: any("'lost reply'" in s for s in statements))
    with through.begin() as conn:  # not the chosen one: its reply arrives
        conn.execute(text("INSERT INTO probe (id, note) VALUES (1, 'plain')"))
    assert not sprung.is_set()
    with pytest.raises(DBAPIError) as failed, through.begin() as conn:
        conn.execute(text("INSERT INTO probe (id, note) VALUES (2, 'lost reply')"))
    assert failed.value.connection_invalidated  # the client cannot know what happened...
    assert sprung.is_set()
    assert _count(direct) == 2  # ...but the server committed
    dropped = [c.statements for c in proxy.commits if c.dropped]
    assert len(dropped) == 1 and any("'lost reply'" in s for s in dropped[0]), dropped
    with through.begin() as conn:  # and the pool gets a fresh connection afterwards
        conn.execute(text("INSERT INTO probe (id, note) VALUES (3, 'after')"))
    assert _count(direct) == 3


def test_hold_release_cut_and_refuse(proxied: tuple[TcpProxy, Engine, Engine]) -> None:
    proxy, through, direct = proxied
    assert _count(through) == 0  # a pooled connection now exists
    proxy.hold()
    done = threading.Event()

    def insert() -> None:
        with through.begin() as conn:
            conn.execute(text("INSERT INTO probe (id, note) VALUES (1, 'held')"))
        done.set()

    worker = threading.Thread(target=insert)
    worker.start()
    assert not done.wait(0.5)  # held: nothing reached the server
    assert _count(direct) == 0
    proxy.release()
    assert done.wait(10)
    worker.join()
    assert _count(direct) == 1

    proxy.cut()  # pooled connections die; pre-ping replaces them on checkout
    assert _count(through) == 1

    proxy.refuse()
    started = time.monotonic()
    with pytest.raises(DBAPIError), through.connect() as conn:
        conn.execute(text("SELECT 1"))
    assert time.monotonic() - started < 10
    proxy.release()
    assert _count(through) == 1
