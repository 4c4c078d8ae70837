"""Signing in: ``next`` is checked before anything else (never a 500, never off the site), HEAD
is no attempt, and failed sign-ins are counted in the database per client address and per
account: spraying names from one address is refused, an account under attack slows down only the
addresses that guessed wrong, and the right password from elsewhere always signs in. Behind
HAI_TRUSTED_PROXIES proxies the client address comes from X-Forwarded-For, else never."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select

from scheduler_core.db.account_tables import login_failures
from scheduler_core.errors import ConfigError
from scheduler_core.runtime.accounts import (
    ACCOUNT_FIRST_WAIT_MS,
    ACCOUNT_FREE,
    ACCOUNT_MAX_WAIT_MS,
    ADDRESS_LIMIT,
    FAILURE_WINDOW_MS,
    FailureCounts,
    login_verdict,
)
from scheduler_core.testing import set_clock_offset
from tests.webapp.conftest import ADMIN_PASSWORD, _dashboard, csrf_token

NOW = 10_000_000


class Browser:
    """A client at one address (REMOTE_ADDR), optionally behind a proxy that sends X-Forwarded-For."""

    def __init__(self, app: Flask, address: str = "192.0.2.1", forwarded: str | None = None) -> None:
        self.client: FlaskClient = app.test_client()
        self.environ = {"REMOTE_ADDR": address}
        self.headers = {"X-Forwarded-For": forwarded} if forwarded else {}
        self.token = csrf_token(self.client)

    def login(self, name: str = "admin", password: str = ADMIN_PASSWORD, query: str = "", **form: str) -> Any:
        return self.client.post(f"/login{query}", data={"username": name, "password": password,
                                                        "csrf_token": self.token, **form},
                                environ_base=self.environ, headers=self.headers)


def _failures(app: Flask) -> int:
    with app.extensions["hai_engine"].connect() as conn:
        count = int(conn.execute(select(func.count()).select_from(login_failures)).scalar_one())
        conn.rollback()
    return count


# --- next -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["/x\r\ny", "/x\ny", "/\x00", "//evil.example/x", "/\\evil.example", "/\\/evil",
                                 "https://evil.example/", "javascript:alert(1)", "evil.example", "/" + "a" * 3000])
def test_a_bad_next_is_dropped_before_anything(db_app: Flask, bad: str) -> None:
    browser = Browser(db_app)
    page = browser.client.get("/login", query_string={"next": bad})
    assert page.status_code == 200 and 'name="next" value=""' in page.get_data(as_text=True)
    in_query = browser.login(query="?" + "next=" + "".join(f"%{b:02x}" for b in bad.encode()))
    in_form = Browser(db_app, "192.0.2.2").login(next=bad)
    for response in (in_query, in_form):
        assert response.status_code == 302 and response.headers["Location"] == "/"


def test_a_good_next_is_followed(db_app: Flask) -> None:
    target = "/tasks/view/x%2Fy?before=abc&q=1"
    assert Browser(db_app).login(next=target).headers["Location"] == target
    page = Browser(db_app).client.get("/tasks/?q=status:failed")
    assert page.status_code == 302 and page.headers["Location"] == "/login?next=/tasks/?q%3Dstatus:failed"


def test_head_is_no_sign_in_attempt(db_app: Flask) -> None:
    browser = Browser(db_app)
    for _ in range(ADDRESS_LIMIT + 5):
        assert browser.client.head("/login", environ_base=browser.environ).status_code == 200
    assert _failures(db_app) == 0 and browser.login().status_code == 302


# --- the rule ----------------------------------------------------------------------------------------


def _counts(from_address: int = 0, on_account: int = 0, last: int | None = None, oldest: int | None = None) -> Any:
    return FailureCounts(NOW, from_address, oldest, on_account, last)


def test_the_rule_refuses_an_address_and_slows_an_account() -> None:
    assert login_verdict(_counts()).allowed
    assert login_verdict(_counts(ADDRESS_LIMIT - 1, oldest=NOW - 1000)).allowed
    refused = login_verdict(_counts(ADDRESS_LIMIT, oldest=NOW - 1000))
    assert (refused.allowed, refused.reason, refused.retry_after_ms) == (False, "address", FAILURE_WINDOW_MS - 1000)
    # an account's failures slow only an address that failed on it, and only after ACCOUNT_FREE of them
    assert login_verdict(_counts(on_account=1000)).allowed
    assert login_verdict(_counts(1, on_account=ACCOUNT_FREE - 1, last=NOW)).allowed
    slowed = login_verdict(_counts(1, on_account=ACCOUNT_FREE, last=NOW - 1000))
    assert (slowed.allowed, slowed.reason, slowed.retry_after_ms) == (False, "account", ACCOUNT_FIRST_WAIT_MS - 1000)
    assert login_verdict(_counts(1, on_account=ACCOUNT_FREE, last=NOW - ACCOUNT_FIRST_WAIT_MS)).allowed
    doubled = login_verdict(_counts(1, on_account=ACCOUNT_FREE + 2, last=NOW))
    assert doubled.retry_after_ms == 4 * ACCOUNT_FIRST_WAIT_MS
    capped = login_verdict(_counts(1, on_account=10**6, last=NOW - 1))
    assert capped.retry_after_ms == ACCOUNT_MAX_WAIT_MS - 1
    assert login_verdict(_counts(1, on_account=10**6, last=NOW - ACCOUNT_MAX_WAIT_MS)).allowed


# --- the throttle, in the database ----------------------------------------------------------------


def test_spraying_names_from_one_address_is_refused(db_app: Flask) -> None:
    sprayer = Browser(db_app, "198.51.100.7")
    for n in range(ADDRESS_LIMIT):
        assert sprayer.login(f"user{n}", "guess-1").status_code == 401, n
    refused = sprayer.login()  # even the right password: this address is done for the window
    assert refused.status_code == 429 and "from your address" in refused.get_data(as_text=True)
    assert 0 < int(refused.headers["Retry-After"]) <= FAILURE_WINDOW_MS // 1000
    assert Browser(db_app, "198.51.100.8").login().status_code == 302  # its neighbour is not


def test_an_account_under_attack_slows_the_guessers_never_its_owner(db_app: Flask) -> None:
    attacker = Browser(db_app, "203.0.113.9")
    for _ in range(ACCOUNT_FREE):
        assert attacker.login(password="guess").status_code == 401
    slowed = attacker.login()
    assert slowed.status_code == 429 and "for this user" in slowed.get_data(as_text=True)
    assert int(slowed.headers["Retry-After"]) <= ACCOUNT_FIRST_WAIT_MS // 1000
    # many strangers, one wrong guess each: the owner still signs in from anywhere else
    for n in range(30):
        assert Browser(db_app, f"203.0.113.{100 + n}").login(password="guess").status_code == 401
    assert Browser(db_app, "192.0.2.77").login().status_code == 302
    # and the guesser may try again once its wait is over (it is the wait of 35 failures, capped)
    set_clock_offset(db_app.extensions["hai_engine"], ACCOUNT_MAX_WAIT_MS + 1000)
    try:
        assert attacker.login().status_code == 302
    finally:
        set_clock_offset(db_app.extensions["hai_engine"], 0)


def test_a_sign_in_forgets_only_its_own_failures(db_app: Flask) -> None:
    browser = Browser(db_app)
    for name in ("admin", "admin", "nobody"):
        assert browser.login(name, "guess").status_code == 401
    assert _failures(db_app) == 3 and browser.login().status_code == 302
    assert _failures(db_app) == 1  # "nobody" from this address still counts


def test_failures_leave_the_window_and_are_pruned(db_app: Flask) -> None:
    sprayer = Browser(db_app, "198.51.100.20")
    for n in range(ADDRESS_LIMIT):
        sprayer.login(f"user{n}", "guess")
    assert sprayer.login().status_code == 429
    set_clock_offset(db_app.extensions["hai_engine"], FAILURE_WINDOW_MS + 1000)
    try:
        assert sprayer.login("someone", "guess").status_code == 401  # pruned the others as it was counted
        assert _failures(db_app) == 1 and sprayer.login().status_code == 302
    finally:
        set_clock_offset(db_app.extensions["hai_engine"], 0)


def test_ipv6_clients_count_by_their_64(db_app: Flask) -> None:
    for n in range(ADDRESS_LIMIT):
        assert Browser(db_app, f"2001:db8:1:2::{n + 1:x}").login(f"user{n}", "guess").status_code == 401
    assert Browser(db_app, "2001:db8:1:2:ffff::1").login().status_code == 429
    assert Browser(db_app, "2001:db8:1:3::1").login().status_code == 302


# --- proxies ----------------------------------------------------------------------------------------


@pytest.fixture
def proxied_app(tmp_path: Any) -> Iterator[Flask]:
    """The dashboard behind one trusted proxy (HAI_TRUSTED_PROXIES=1)."""
    yield from _dashboard(f"sqlite:///{tmp_path}/proxied.db", TRUSTED_PROXIES=1, SECRET_KEY="p" * 40)


def test_without_trusted_proxies_x_forwarded_for_is_ignored(app: Flask) -> None:
    for n in range(ADDRESS_LIMIT):
        assert Browser(app, "10.0.0.1", forwarded=f"192.0.2.{n}").login(f"user{n}", "guess").status_code == 401
    assert Browser(app, "10.0.0.1", forwarded="192.0.2.250").login().status_code == 429


def test_behind_a_trusted_proxy_each_client_counts_alone(proxied_app: Flask) -> None:
    proxy = "10.0.0.1"
    for n in range(ADDRESS_LIMIT):  # a client spoofs a first hop; the proxy appends what it saw
        sprayer = Browser(proxied_app, proxy, forwarded=f"198.51.100.{n}, 203.0.113.5")
        assert sprayer.login(f"user{n}", "guess").status_code == 401
    assert Browser(proxied_app, proxy, forwarded="203.0.113.5").login().status_code == 429
    assert Browser(proxied_app, proxy, forwarded="203.0.113.6").login().status_code == 302  # nobody else is locked out


@pytest.mark.parametrize("value", ["abc", -1, 17, True, "1.5"])
def test_a_bad_trusted_proxy_count_stops_the_start(tmp_path: Any, value: Any) -> None:
    with pytest.raises(ConfigError) as refused:
        next(_dashboard(f"sqlite:///{tmp_path}/bad.db", TRUSTED_PROXIES=value, SECRET_KEY="p" * 40))
    assert refused.value.field == "HAI_TRUSTED_PROXIES"
