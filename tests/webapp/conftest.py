"""Dashboard fixtures in the flaskr style: ``app``, ``client``, ``auth``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from scheduler_core.db import close_engine
from tests.conftest import TestDatabase
from webapp import create_app

ADMIN_PASSWORD = "correct horse battery"


CONSOLE_REACH = {"providers": [{"name": "log", "type": "console"}]}  # templates need a provider


def _dashboard(url: str, **config: Any) -> Iterator[Flask]:
    application = create_app({"DATABASE_URL": url, "ADMIN_PASSWORD": ADMIN_PASSWORD, "TESTING": True, **config})
    yield application
    application.extensions["hai_scheduler"].close()
    application.extensions["hai_reach"].close()
    close_engine(application.extensions["hai_engine"])


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Flask]:
    monkeypatch.delenv("HAI_SECRET_KEY", raising=False)
    yield from _dashboard(f"sqlite:///{tmp_path}/dash.db")


@pytest.fixture
def db_app(database: TestDatabase) -> Iterator[Flask]:
    """The dashboard on each database (SQLite, PostgreSQL, MariaDB), with a console provider
    for templates: what must answer alike everywhere."""
    # A key given: no key file is written (beside a server database it would land in the cwd).
    yield from _dashboard(database.url, REACH=CONSOLE_REACH, SECRET_KEY="db-app-" + "k" * 32)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def csrf_token(client: FlaskClient, path: str = "/login") -> str:
    page = client.get(path).get_data(as_text=True)
    match = re.search(r'name="csrf-token" content="([^"]+)"', page) or re.search(
        r'name="csrf_token"[^>]*value="([^"]+)"', page)
    assert match, "no CSRF token on the page"
    return match.group(1)


class Auth:
    def __init__(self, client: FlaskClient) -> None:
        self.client = client

    def login(self, name: str = "admin", password: str = ADMIN_PASSWORD, **extra: Any) -> Any:
        token = csrf_token(self.client)
        return self.client.post("/login", data={"username": name, "password": password, "csrf_token": token,
                                                **extra})

    def logout(self) -> Any:
        return self.client.post("/logout", data={"csrf_token": csrf_token(self.client, "/")})


@pytest.fixture
def auth(client: FlaskClient) -> Auth:
    return Auth(client)
