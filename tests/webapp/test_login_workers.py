"""Sign-ins under the real server: `hai-scheduler serve` with two gunicorn workers. The login
throttle used to live in each worker's memory (9 failures got through before the first 429, and
a proxy made every client one); counts and sessions are in the database now, so every worker
answers alike: the 21st failure from one client address is refused whichever worker takes it,
and a session logged out on one worker is over on the other. Every request opens its own
connection, so the two workers share them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from scheduler_core.runtime.accounts import ADDRESS_LIMIT
from tests.helpers.served import serve

pytestmark = pytest.mark.slow
ADMIN_PASSWORD = "first admin pw"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """The dashboard under gunicorn (2 workers, 2 threads each) behind one trusted proxy."""
    env = {"HAI_DATABASE_URL": f"sqlite:///{tmp_path}/served.db", "HAI_ADMIN_PASSWORD": ADMIN_PASSWORD,
           "HAI_TRUSTED_PROXIES": "1", "HAI_THREADS": "2"}
    with serve(tmp_path, env) as base:
        yield base


def _fresh(client_address: str) -> requests.Session:
    """A browser behind the proxy: a new connection per request, the proxy's X-Forwarded-For."""
    browser = requests.Session()
    browser.headers.update({"Connection": "close", "X-Forwarded-For": client_address})
    return browser


def _login(base: str, browser: requests.Session, name: str, password: str) -> requests.Response:
    page = browser.get(f"{base}/login", timeout=10)
    token = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    return browser.post(f"{base}/login", data={"username": name, "password": password, "csrf_token": token},
                        allow_redirects=False, timeout=10)


def test_the_throttle_and_sessions_hold_across_workers(served: str) -> None:
    sprayer = "203.0.113.5"
    statuses = [_login(served, _fresh(sprayer), f"user{n}", "guess").status_code for n in range(ADDRESS_LIMIT)]
    assert statuses == [401] * ADDRESS_LIMIT
    for _ in range(4):  # whichever worker answers
        refused = _login(served, _fresh(sprayer), "admin", ADMIN_PASSWORD)
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
    owner = _fresh("198.51.100.9")
    assert _login(served, owner, "admin", ADMIN_PASSWORD).status_code == 302  # another client is not refused
    cookie = owner.cookies.get("session")
    assert cookie
    replayed = [_fresh("192.0.2.1") for _ in range(4)]
    for thief in replayed:
        thief.cookies.set("session", cookie)
        assert thief.get(f"{served}/", allow_redirects=False, timeout=10).status_code == 200
    page = owner.get(f"{served}/", timeout=10).text
    token = page.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
    assert owner.post(f"{served}/logout", data={"csrf_token": token}, allow_redirects=False,
                      timeout=10).status_code == 302
    for thief in replayed:  # a copy of the cookie is over on every worker
        assert thief.get(f"{served}/", allow_redirects=False, timeout=10).status_code == 302
