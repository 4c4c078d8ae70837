"""Sessions live on the server: the cookie carries a token the database must still know, so a
copy of the cookie stops working after logout, a password reset, disabling or a role change;
idle and old sessions expire (DB clock), and expired rows are pruned. On every database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select
from werkzeug.security import generate_password_hash

from scheduler_core.db.account_tables import user_sessions
from scheduler_core.runtime.accounts import SESSION_IDLE_MS, SESSION_LIFETIME_MS, SESSION_TOUCH_MS, Logins
from scheduler_core.testing import set_clock_offset
from tests.webapp.conftest import ADMIN_PASSWORD, Auth, csrf_token
from webapp.node import accounts_of

MEMBER_PASSWORD = "member-password"


def _signed_in(app: Flask, name: str = "admin", password: str = ADMIN_PASSWORD) -> FlaskClient:
    client = app.test_client()
    assert Auth(client).login(name, password).status_code == 302
    return client


def _copy(app: Flask, client: FlaskClient) -> FlaskClient:
    """Another browser holding a copy of ``client``'s session cookie (a replayed cookie)."""
    cookie = client.get_cookie("session")
    assert cookie is not None
    thief = app.test_client()
    thief.set_cookie("session", cookie.value)
    return thief


def _in(client: FlaskClient) -> bool:
    response = client.get("/")
    assert response.status_code in (200, 302), response.status_code
    return response.status_code == 200


def _rows(app: Flask) -> int:
    with app.extensions["hai_engine"].connect() as conn:
        count = int(conn.execute(select(func.count()).select_from(user_sessions)).scalar_one())
        conn.rollback()
    return count


@pytest.fixture
def clock(db_app: Flask) -> Iterator[list[int]]:
    """The offset of the app's database clock in ms, moved forward by ``_advance``."""
    engine = db_app.extensions["hai_engine"]
    offset = [0]
    yield offset
    set_clock_offset(engine, 0)


def _advance(app: Flask, clock: list[int], ms: int) -> None:
    clock[0] += ms
    set_clock_offset(app.extensions["hai_engine"], clock[0])


def test_a_cookie_replayed_after_logout_is_refused(db_app: Flask) -> None:
    client = _signed_in(db_app)
    thief = _copy(db_app, client)
    assert _in(thief)
    assert Auth(client).logout().status_code == 302
    assert not _in(thief) and not _in(client)
    assert _rows(db_app) == 0


def test_signing_in_again_ends_the_session_the_browser_had(db_app: Flask) -> None:
    client = _signed_in(db_app)
    before = _copy(db_app, client)
    assert Auth(client).login().status_code == 302
    assert _in(client) and not _in(before) and _rows(db_app) == 1


def test_a_cookie_from_before_server_side_sessions_is_signed_out(db_app: Flask) -> None:
    client = db_app.test_client()
    with client.session_transaction() as old:
        old["user"], old["credential"] = "admin", "0123456789abcdef"  # what a signed cookie held before 0008
    assert not _in(client)
    with client.session_transaction() as forged:
        forged["sid"] = "x" * 43  # a well-formed token no session has
    assert not _in(client)


def _member(app: Flask, role: str = "viewer") -> None:
    assert accounts_of(app).create("member", role, generate_password_hash(MEMBER_PASSWORD))


def _version(app: Flask, name: str) -> int:
    user = accounts_of(app).get(name)
    assert user is not None
    return user.updated_at


CHANGES = {
    "role": lambda version: ("/users/role/member", {"role": "operator", "expected_updated_at": version}),
    "password": lambda version: ("/users/password/member", {"password": "another-pass-1", "confirm": "another-pass-1",
                                                           "expected_updated_at": version}),
    "disable": lambda version: ("/users/disable/member", {"expected_updated_at": version}),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_an_admins_change_ends_every_session_of_the_user(db_app: Flask, change: str) -> None:
    _member(db_app)
    member = _signed_in(db_app, "member", MEMBER_PASSWORD)
    elsewhere, thief = _signed_in(db_app, "member", MEMBER_PASSWORD), _copy(db_app, member)
    admin = _signed_in(db_app)
    path, form = CHANGES[change](_version(db_app, "member"))
    assert admin.post(path, data={**form, "csrf_token": csrf_token(admin, "/")}).status_code == 303
    assert not any(_in(c) for c in (member, elsewhere, thief)), change
    assert _in(admin) and Logins(db_app.extensions["hai_engine"]).sessions_of("member") == 0


@pytest.mark.parametrize("change", ["role", "password"])
def test_changing_ones_own_account_keeps_this_session_and_ends_the_others(db_app: Flask, change: str) -> None:
    # a second admin: the first may step down
    assert accounts_of(db_app).create("second", "admin", generate_password_hash("second-password"))
    here, other = _signed_in(db_app), _signed_in(db_app)
    form = ({"role": "operator"} if change == "role"
            else {"password": "a-new-admin-pw", "confirm": "a-new-admin-pw"})
    response = here.post(f"/users/{change}/admin", data={**form, "expected_updated_at": _version(db_app, "admin"),
                                                         "csrf_token": csrf_token(here, "/")})
    assert response.status_code == 303
    assert _in(here) and not _in(other)


def test_the_cli_password_reset_ends_every_session(db_app: Flask) -> None:
    client = _signed_in(db_app)
    assert accounts_of(db_app).set_password("admin", generate_password_hash("cli-reset-pw"))  # create-user --reset
    assert not _in(client)


def test_idle_sessions_expire_and_active_ones_last_until_the_lifetime(db_app: Flask, clock: list[int]) -> None:
    idle = _signed_in(db_app)
    active = _signed_in(db_app)
    step = SESSION_IDLE_MS - 5 * 60_000  # a request every 55 minutes keeps a session
    for _ in range(3):
        _advance(db_app, clock, step)
        assert _in(active)
    assert not _in(idle)  # 2 h 45 without a request
    while clock[0] + step < SESSION_LIFETIME_MS:
        _advance(db_app, clock, step)
        assert _in(active)
    _advance(db_app, clock, SESSION_LIFETIME_MS - clock[0] + 1000)
    assert not _in(active)  # 12 h after signing in, however active


def test_a_session_is_written_at_most_once_a_minute(db_app: Flask, clock: list[int]) -> None:
    client = _signed_in(db_app)

    def last_seen() -> int:
        with db_app.extensions["hai_engine"].connect() as conn:
            value = int(conn.execute(select(user_sessions.c.last_seen_at)).scalar_one())
            conn.rollback()
        return value

    first = last_seen()
    for _ in range(5):
        assert _in(client)
    _advance(db_app, clock, SESSION_TOUCH_MS - 5_000)
    assert _in(client) and last_seen() == first
    _advance(db_app, clock, 10_000)
    assert _in(client) and last_seen() > first


def test_expired_sessions_are_pruned_by_the_next_sign_in(db_app: Flask, clock: list[int]) -> None:
    _signed_in(db_app)
    _signed_in(db_app)
    assert _rows(db_app) == 2
    _advance(db_app, clock, SESSION_IDLE_MS + 1000)
    _signed_in(db_app)
    assert _rows(db_app) == 1
