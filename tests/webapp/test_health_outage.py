"""``/healthz`` while the database does not answer (a failover's seconds without a primary): 503
with since when, the same time on every call of the outage, one log line as it begins and one as it
ends, and 200 again without a restart once the database answers (issue #31)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from flask import Flask

from tests.conftest import TestDatabase
from tests.helpers.tcp_proxy import TcpProxy
from tests.webapp.conftest import CONSOLE_REACH, _dashboard


@pytest.fixture
def proxied_app(server_database: TestDatabase) -> Iterator[tuple[Flask, TcpProxy]]:
    proxy = TcpProxy.for_url(server_database.url)
    try:
        for app in _dashboard(proxy.url(server_database.url), REACH=CONSOLE_REACH, SECRET_KEY="o" * 40):
            yield app, proxy
    finally:
        proxy.close()


def test_healthz_says_since_when_the_database_is_unreachable(proxied_app: tuple[Flask, TcpProxy],
                                                            caplog: pytest.LogCaptureFixture) -> None:
    app, proxy = proxied_app
    client = app.test_client()
    assert client.get("/healthz").status_code == 200
    caplog.set_level(logging.WARNING, logger="scheduler_core.outage")  # the process's one outage
    proxy.refuse()
    first = client.get("/healthz")
    second = client.get("/healthz")
    assert (first.status_code, second.status_code) == (503, 503)
    assert first.json["database"].startswith("unreachable since 20") and first.json["database"].endswith("Z")
    assert first.json["unreachable_since_ms"] == second.json["unreachable_since_ms"]
    began = "database " + first.json["database"] + ": "
    assert sum(began in r.getMessage() for r in caplog.records) == 1  # once, not per call
    proxy.release()
    back = client.get("/healthz")
    assert back.status_code == 200 and "database" not in back.json
    assert sum("reachable again after" in r.getMessage() for r in caplog.records) == 1
    assert client.get("/healthz").status_code == 200
    assert sum("reachable again after" in r.getMessage() for r in caplog.records) == 1
