"""Dashboard accounts on every database: validation naming the field, listing by name, role
and disabled changes as compare-and-sets on ``updated_at``, the last enabled admin kept, and
two admins demoting (or disabling) each other at the same moment leaving one admin."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core.db.account_tables import users
from scheduler_core.errors import ConfigError, ConflictError
from scheduler_core.runtime.accounts import Accounts, LastAdminError, User, check_new_password
from tests.helpers.race import race

HASH = "scrypt:32768:8:1$salt$digest"  # the store never reads it: any hash-shaped string will do


@pytest.fixture
def accounts(engine: Engine) -> Accounts:
    return Accounts(engine)


def _get(accounts: Accounts, name: str) -> User:
    user = accounts.get(name)
    assert user is not None, name
    return user


def _raw(engine: Engine) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(select(users).order_by(users.c.username))]


def test_create_get_and_page_by_name(accounts: Accounts) -> None:
    for name, role in (("zed", "viewer"), ("ops.team@example", "operator"), ("Admin_1", "admin"), ("a-b", "viewer")):
        assert accounts.create(name, role, HASH)
    assert not accounts.create("zed", "admin", HASH)  # taken: False, nothing changed
    zed = _get(accounts, "zed")
    assert (zed.role, zed.disabled, zed.last_login_at, zed.created_at == zed.updated_at) == ("viewer", False, None,
                                                                                             True)
    assert HASH not in repr(zed)  # a User never shows its hash in a log line
    names = [u.name for u in accounts.page(None, 100)]
    assert names == sorted(names) and set(names) == {"zed", "ops.team@example", "Admin_1", "a-b"}
    first, rest = accounts.page(None, 2), accounts.page(names[1], 100)
    assert [u.name for u in first + rest] == names
    assert accounts.count() == 4 and accounts.count_enabled_admins() == 1
    assert accounts.get("nobody") is None and accounts.get("") is None and accounts.get("x" * 65) is None


@pytest.mark.parametrize(("name", "role", "password_hash", "field"), [
    ("", "viewer", HASH, "name"),
    ("two words", "viewer", HASH, "name"),
    ("x" * 65, "viewer", HASH, "name"),
    ("jürgen", "viewer", HASH, "name"),
    ("a/b", "viewer", HASH, "name"),
    ("..", "viewer", HASH, "name"),
    (" padded", "viewer", HASH, "name"),
    ("okname", "root", HASH, "role"),
    ("okname", "viewer", "", "password_hash"),
    ("okname", "viewer", "h" * 256, "password_hash"),
])
def test_bad_creates_name_the_field_and_store_nothing(engine: Engine, accounts: Accounts, name: str, role: str,
                                                      password_hash: str, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        accounts.create(name, role, password_hash)
    assert caught.value.field == field
    assert _raw(engine) == []


def test_new_password_rules() -> None:
    assert check_new_password("eight ch", "eight ch") == "eight ch"
    for password, confirm, field in (("seven c", "seven c", "password"), ("x" * 1025, "x" * 1025, "password"),
                                     ("long enough", "long enougH", "confirm"), (None, None, "password")):
        with pytest.raises(ConfigError) as caught:
            check_new_password(password, confirm)
        assert caught.value.field == field and "enough" not in caught.value.message  # never echoes it


def test_role_and_disabled_are_compare_and_set(engine: Engine, accounts: Accounts) -> None:
    accounts.create("boss", "admin", HASH)
    accounts.create("member", "viewer", HASH)
    member = _get(accounts, "member")
    promoted = accounts.set_role("member", "operator", member.updated_at)
    assert promoted.role == "operator" and promoted.updated_at > member.updated_at
    before = _raw(engine)
    stale_changes: list[Callable[[], User]] = [
        lambda: accounts.set_role("member", "admin", member.updated_at),
        lambda: accounts.set_disabled("member", True, member.updated_at),
        lambda: accounts.reset_password("member", "other-hash", member.updated_at),
        lambda: accounts.set_role("nobody", "admin", member.updated_at)]
    for stale in stale_changes:
        with pytest.raises(ConflictError):
            stale()
    assert _raw(engine) == before
    disabled = accounts.set_disabled("member", True, promoted.updated_at, actor="boss")
    assert disabled.disabled and disabled.updated_at > promoted.updated_at
    enabled = accounts.set_disabled("member", False, disabled.updated_at, actor="boss")
    reset = accounts.reset_password("member", "new-hash", enabled.updated_at)
    assert (reset.password_hash, reset.disabled, reset.role) == ("new-hash", False, "operator")
    accounts.record_login("member")  # a login is no change of the account: the version stays
    after_login = _get(accounts, "member")
    assert after_login.last_login_at is not None and after_login.updated_at == reset.updated_at
    assert accounts.set_password("member", "cli-hash") and _get(accounts, "member").updated_at > reset.updated_at
    assert not accounts.set_password("nobody", "cli-hash")


@pytest.mark.parametrize(("call", "field"), [
    (lambda a, v: a.set_role("member", "root", v), "role"),
    (lambda a, v: a.set_role("member", "admin", -1), "expected_updated_at"),
    (lambda a, v: a.set_role("member", "admin", "12"), "expected_updated_at"),
    (lambda a, v: a.set_disabled("member", "yes", v), "disabled"),
    (lambda a, v: a.set_disabled("member", True, v, actor="member"), "disabled"),
    (lambda a, v: a.reset_password("member", "", v), "password_hash"),
    (lambda a, v: a.set_role("", "admin", v), "name"),
])
def test_bad_changes_name_the_field(engine: Engine, accounts: Accounts, call: Callable[[Accounts, int], object],
                                    field: str) -> None:
    accounts.create("member", "admin", HASH)
    accounts.create("other", "admin", HASH)  # never the last admin here: only the input is wrong
    version = _get(accounts, "member").updated_at
    before = _raw(engine)
    with pytest.raises(ConfigError) as caught:
        call(accounts, version)
    assert caught.value.field == field and not isinstance(caught.value, LastAdminError)
    assert _raw(engine) == before


def test_the_last_enabled_admin_stays(engine: Engine, accounts: Accounts) -> None:
    accounts.create("alice", "admin", HASH)
    alice = _get(accounts, "alice")
    before = _raw(engine)
    with pytest.raises(LastAdminError) as demoted:
        accounts.set_role("alice", "operator", alice.updated_at)
    assert demoted.value.field == "role" and "last enabled admin" in demoted.value.message
    with pytest.raises(LastAdminError) as disabled:
        accounts.set_disabled("alice", True, alice.updated_at, actor="someone-else")
    assert disabled.value.field == "disabled"
    assert _raw(engine) == before
    assert accounts.set_role("alice", "admin", alice.updated_at).role == "admin"  # staying admin is fine
    # a disabled admin does not count; an enabled second one does
    accounts.create("bob", "admin", HASH)
    bob = accounts.set_disabled("bob", True, _get(accounts, "bob").updated_at)
    assert accounts.count_enabled_admins() == 1
    with pytest.raises(LastAdminError):
        accounts.set_role("alice", "viewer", _get(accounts, "alice").updated_at)
    accounts.set_disabled("bob", False, bob.updated_at)
    assert accounts.count_enabled_admins() == 2
    assert accounts.set_role("alice", "viewer", _get(accounts, "alice").updated_at).role == "viewer"
    with pytest.raises(LastAdminError):
        accounts.set_disabled("bob", True, _get(accounts, "bob").updated_at)
    assert accounts.count_enabled_admins() == 1


def _both_admins(accounts: Accounts) -> None:
    for name in ("alice", "bob"):
        user = accounts.get(name)
        if user is None:
            accounts.create(name, "admin", HASH)
        elif user.role != "admin" or user.disabled:
            user = accounts.set_role(name, "admin", user.updated_at)
            accounts.set_disabled(name, False, user.updated_at)


def _mutual_removal(accounts: Accounts, change: str) -> Callable[[], None]:
    """One call per racer: alice removes bob, bob removes alice, each on the version it read."""
    versions = {name: _get(accounts, name).updated_at for name in ("alice", "bob")}
    moves = [("alice", "bob"), ("bob", "alice")]  # (actor, target)
    lock = threading.Lock()

    def move() -> None:
        with lock:
            actor, target = moves.pop()
        if change == "demote":
            accounts.set_role(target, "operator", versions[target])
        else:
            accounts.set_disabled(target, True, versions[target], actor=actor)

    return move


@pytest.mark.parametrize("change", ["demote", "disable"])
def test_two_admins_demoting_each_other_leave_one(accounts: Accounts, change: str) -> None:
    """Each admin removes the other at the same moment: the check and the change are one
    transaction under the admins' row locks, so exactly one wins and one admin remains."""
    for _ in range(5):
        _both_admins(accounts)
        assert race(_mutual_removal(accounts, change), LastAdminError, racers=2) == ["lost", "won"]
        remaining = [u.name for u in accounts.page(None, 10) if u.role == "admin" and not u.disabled]
        assert len(remaining) == 1 and accounts.count_enabled_admins() == 1
