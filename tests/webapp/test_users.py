"""Users pages (admin only): list, create, role, disable / enable, password reset.

Real app on real SQLite through the Flask test client: every page and action refuses viewers
and operators (403) and posts without a CSRF token (400); bad input re-renders with the
message next to the field and stores nothing; a stale page's version gives the conflict
message and changes nothing; the last enabled admin stays; a role change, a password reset or
disabling ends the user's sessions at once; the audit trail records every change and never a
password or a hash.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import check_password_hash, generate_password_hash

from scheduler_core.runtime.accounts import Accounts, User
from tests.webapp.conftest import ADMIN_PASSWORD, Auth, csrf_token
from webapp.node import accounts_of, audit_of
from webapp.users import PAGE

NEW_PASSWORD = "n3w-Secret-pass!"
CONFLICT_TEXT = "changed since the page was loaded"


def _accounts(app: Flask) -> Accounts:
    accounts: Accounts = accounts_of(app)
    return accounts


def _user(app: Flask, name: str) -> User:
    user = _accounts(app).get(name)
    assert user is not None, name
    return user


def _add(app: Flask, name: str, role: str, password: str | None = None) -> User:
    assert _accounts(app).create(name, role, generate_password_hash(password or f"{name}-password"))
    return _user(app, name)


def _post(client: FlaskClient, path: str, csrf: bool = True, headers: dict[str, str] | None = None,
          **form: Any) -> Any:
    if csrf:
        form["csrf_token"] = csrf_token(client, "/")
    return client.post(path, data=form, headers=headers or {})


def _text(response: Any) -> str:
    return html.unescape(response.get_data(as_text=True))


def _field_error(page: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}-error">([^<]*)<', page)
    return html.unescape(match.group(1)) if match else ""


def _value(page: str, element_id: str) -> str | None:
    """The value a field of ``page`` is shown with (None: no value attribute)."""
    match = re.search(rf'<input id="{element_id}"[^>]*\svalue="([^"]*)"', page)
    return match.group(1) if match else None


def _flashes(client: FlaskClient, path: str) -> str:
    return _text(client.get(path))


def _audit(app: Flask, action: str | None = None) -> list[Any]:
    entries: list[Any] = audit_of(app).list(action=action, limit=100)
    return entries


def _state(app: Flask) -> list[tuple[str, str, bool, int, str]]:
    """Every user as stored, to compare before / after a refused request."""
    return [(u.name, u.role, u.disabled, u.updated_at, u.password_hash) for u in _accounts(app).page(None, 100)]


def _second_client(app: Flask, name: str, password: str) -> FlaskClient:
    other = app.test_client()
    assert Auth(other).login(name, password).status_code == 302
    return other


# --- the list and the nav -------------------------------------------------------------------------


def test_admin_sees_every_user_with_role_status_and_times(app: Flask, client: FlaskClient, auth: Auth) -> None:
    _add(app, "viewer1", "viewer")
    _add(app, "ops.team@example", "operator")
    _add(app, "gone_user", "viewer")
    _accounts(app).set_disabled("gone_user", True, _user(app, "gone_user").updated_at)
    auth.login()
    response = client.get("/users/")
    page = _text(response)
    assert response.status_code == 200
    for name in ("admin", "viewer1", "ops.team@example", "gone_user"):
        assert f">{name}</a>" in page
    assert 'href="/users/"' in page and ">Users</a>" in page  # the nav link, for an admin
    assert "badge-role-operator" in page and "badge-user-disabled" in page and "never" in page
    admin = _user(app, "admin")
    assert admin.last_login_at is not None and f'datetime="{_iso(admin.last_login_at)}"' in page
    assert "1 enabled admin:" in page
    assert admin.password_hash not in page and "scrypt" not in page and "pbkdf2" not in page


def _iso(ms: int) -> str:
    from webapp.timefmt import iso

    return iso(ms)


def test_list_pages_by_name(app: Flask, client: FlaskClient, auth: Auth) -> None:
    hashed = generate_password_hash("shared-password")  # one hash: creating 105 users stays fast
    names = [f"user{i:03d}" for i in range(PAGE + 5)]
    for name in names:
        assert _accounts(app).create(name, "viewer", hashed)
    auth.login()
    seen: list[str] = []
    url: str | None = "/users/"
    while url:
        page = _text(client.get(url))
        seen += re.findall(r'<td><a href="/users/manage/([^"]+)">', page)
        found = re.search(r'<a href="([^"]+)" rel="next">', page)
        url = html.unescape(found.group(1)) if found else None
    assert seen == sorted(["admin", *names])
    assert client.get("/users/?after=" + "x" * 65).status_code == 400


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_viewers_and_operators_get_403_everywhere(app: Flask, client: FlaskClient, auth: Auth, role: str) -> None:
    _add(app, f"{role}1", role, "member-password")
    target = _add(app, "target", "viewer")
    auth.login(f"{role}1", "member-password")
    assert ">Users</a>" not in _text(client.get("/"))  # no nav link below admin
    for path in ("/users/", "/users/new", "/users/manage/target", "/users/manage/admin"):
        assert client.get(path).status_code == 403, path
    before = _state(app)
    version = target.updated_at
    posts: list[tuple[str, dict[str, Any]]] = [
        ("/users/new", {"name": "intruder", "role": "admin", "password": NEW_PASSWORD, "confirm": NEW_PASSWORD}),
        ("/users/role/target", {"role": "admin", "expected_updated_at": version}),
        ("/users/disable/target", {"expected_updated_at": version}),
        ("/users/enable/target", {"expected_updated_at": version}),
        ("/users/password/target", {"password": NEW_PASSWORD, "confirm": NEW_PASSWORD, "expected_updated_at": version}),
        (f"/users/role/{role}1", {"role": "admin", "expected_updated_at": _user(app, f"{role}1").updated_at})]
    for path, form in posts:
        assert _post(client, path, **form).status_code == 403, path
    assert _state(app) == before and _audit(app) == []


def test_posts_without_csrf_token_are_refused(app: Flask, client: FlaskClient, auth: Auth) -> None:
    target = _add(app, "target", "viewer")
    auth.login()
    before = _state(app)
    version = target.updated_at
    posts: list[tuple[str, dict[str, Any]]] = [
        ("/users/new", {"name": "newbie", "role": "viewer", "password": NEW_PASSWORD, "confirm": NEW_PASSWORD}),
        ("/users/role/target", {"role": "admin", "expected_updated_at": version}),
        ("/users/disable/target", {"expected_updated_at": version}),
        ("/users/password/target", {"password": NEW_PASSWORD, "confirm": NEW_PASSWORD, "expected_updated_at": version})]
    for path, form in posts:
        assert _post(client, path, csrf=False, **form).status_code == 400, path
        htmx = _post(client, path, csrf=False, headers={"HX-Request": "true"}, **form)
        assert htmx.status_code == 400 and htmx.headers["HX-Refresh"] == "true"
    assert _state(app) == before and _audit(app) == []


def test_unknown_user_is_404(client: FlaskClient, auth: Auth) -> None:
    auth.login()
    assert client.get("/users/manage/nobody").status_code == 404
    assert _post(client, "/users/role/nobody", role="viewer", expected_updated_at=1).status_code == 404


# --- create ----------------------------------------------------------------------------------------


def test_create_user_then_they_log_in(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    page = _text(client.get("/users/new"))
    assert 'name="csrf_token"' in page and '<label for="new-confirm">' in page
    response = _post(client, "/users/new", name="ops.team@example", role="operator", password=NEW_PASSWORD,
                     confirm=NEW_PASSWORD)
    assert response.status_code == 303 and response.headers["Location"] == "/users/"
    assert "User ops.team@example created (operator)." in _flashes(client, "/users/")
    created = _user(app, "ops.team@example")
    assert (created.role, created.disabled, created.last_login_at) == ("operator", False, None)
    assert check_password_hash(created.password_hash, NEW_PASSWORD)
    other = _second_client(app, "ops.team@example", NEW_PASSWORD)
    assert other.get("/").status_code == 200 and other.get("/users/").status_code == 403
    [entry] = _audit(app, "user.create")
    assert (entry.actor, entry.target, entry.before, entry.after) == (
        "admin", "ops.team@example", None, {"name": "ops.team@example", "role": "operator", "disabled": False})


BAD_CREATES = [
    ({"name": "", "role": "viewer"}, "new-name", "Must be 1..64 characters"),
    ({"name": "two words", "role": "viewer"}, "new-name", "letters, digits and . - _ @ only"),
    ({"name": "x" * 65, "role": "viewer"}, "new-name", "Must be 1..64 characters"),
    ({"name": "jürgen", "role": "viewer"}, "new-name", "letters, digits and . - _ @ only"),
    ({"name": "a/b", "role": "viewer"}, "new-name", "letters, digits and . - _ @ only"),
    ({"name": "..", "role": "viewer"}, "new-name", "not only dots"),
    ({"name": "okname", "role": "superuser"}, "new-role", "Must be one of viewer, operator, admin"),
    ({"name": "okname", "role": "viewer", "password": "short7!", "confirm": "short7!"}, "new-password",
     "Must have at least 8 characters"),
    ({"name": "okname", "role": "viewer", "confirm": NEW_PASSWORD + "x"}, "new-confirm",
     "Must repeat the password exactly"),
    ({"name": "admin", "role": "viewer"}, "new-name", "A user named admin already exists."),
]


@pytest.mark.parametrize(("form", "element", "message"), BAD_CREATES)
def test_create_field_errors_store_nothing(app: Flask, client: FlaskClient, auth: Auth, form: dict[str, Any],
                                           element: str, message: str) -> None:
    auth.login()
    before = _state(app)
    data: dict[str, Any] = {"password": NEW_PASSWORD, "confirm": NEW_PASSWORD, **form}
    response = _post(client, "/users/new", **data)
    page = _text(response)
    assert response.status_code == 400
    assert message in _field_error(page, element), page
    assert "Nothing was saved" in page
    # Shown again as typed, the passwords too (README: "a secret just entered included").
    assert (_value(page, "new-password"), _value(page, "new-confirm")) == (data["password"], data["confirm"])
    assert _state(app) == before and _audit(app) == []


def test_create_errors_for_htmx_are_swappable(app: Flask, client: FlaskClient, auth: Auth) -> None:
    """htmx swaps no 4xx: a boosted form with errors answers 200 and keeps the address bar."""
    auth.login()
    response = _post(client, "/users/new", headers={"HX-Request": "true"}, name="bad name", role="viewer",
                     password=NEW_PASSWORD, confirm=NEW_PASSWORD)
    assert response.status_code == 200 and response.headers["HX-Push-Url"] == "false"
    assert "letters, digits" in _field_error(_text(response), "new-name")
    assert _accounts(app).get("bad name") is None
    assert "hx-boost" not in _text(client.get("/users/new"))  # a plain form: see test_reset_password.py


# --- role -----------------------------------------------------------------------------------------


def test_change_role_ends_their_sessions_and_applies_at_the_next_sign_in(app: Flask, client: FlaskClient,
                                                                          auth: Auth) -> None:
    member = _add(app, "member", "operator", "member-password")
    other = _second_client(app, "member", "member-password")
    assert other.get("/users/").status_code == 403
    auth.login()
    page = _text(client.get("/users/manage/member"))
    assert f'name="expected_updated_at" value="{member.updated_at}"' in page
    response = _post(client, "/users/role/member", role="admin", expected_updated_at=member.updated_at)
    assert response.status_code == 303 and response.headers["Location"] == "/users/manage/member"
    assert "member is now admin: their open sessions have ended." in _flashes(client, "/users/manage/member")
    changed = _user(app, "member")
    assert changed.role == "admin" and changed.updated_at > member.updated_at
    ended = other.get("/users/")  # the session from before the change is over, cookie and all
    assert ended.status_code == 302 and ended.headers["Location"].startswith("/login")
    again = _second_client(app, "member", "member-password")
    assert again.get("/users/").status_code == 200  # signed in again, with the new role
    [entry] = _audit(app, "user.role")
    assert (entry.actor, entry.target, entry.before, entry.after) == (
        "admin", "member", {"role": "operator"}, {"role": "admin"})


def test_stale_role_change_is_a_conflict(app: Flask, client: FlaskClient, auth: Auth) -> None:
    member = _add(app, "member", "viewer")
    auth.login()
    assert _post(client, "/users/role/member", role="operator", expected_updated_at=member.updated_at).status_code \
        == 303
    before = _state(app)
    stale = _post(client, "/users/role/member", role="admin", expected_updated_at=member.updated_at)
    assert stale.status_code == 303 and stale.headers["Location"] == "/users/manage/member"
    page = _flashes(client, "/users/manage/member")
    assert CONFLICT_TEXT in page and "Nothing was changed" in page
    assert _state(app) == before and _user(app, "member").role == "operator"
    assert len(_audit(app, "user.role")) == 1


def test_conflict_message_is_shown(app: Flask, client: FlaskClient, auth: Auth) -> None:
    member = _add(app, "member", "viewer")
    auth.login()
    stale = _post(client, "/users/role/member", role="admin", expected_updated_at=member.updated_at - 1)
    assert stale.status_code == 303
    page = _flashes(client, "/users/manage/member")
    assert f"User member {CONFLICT_TEXT}" in page and "Nothing was changed; review it again." in page
    assert _user(app, "member") == member and _audit(app) == []


@pytest.mark.parametrize(("form", "message"), [
    ({"role": "root"}, "Must be one of viewer, operator, admin"),
    ({"role": "admin", "expected_updated_at": ""}, "missing the user's version"),
    ({"role": "admin", "expected_updated_at": "yesterday"}, "missing the user's version"),
])
def test_bad_role_change_stores_nothing(app: Flask, client: FlaskClient, auth: Auth, form: dict[str, Any],
                                        message: str) -> None:
    member = _add(app, "member", "viewer")
    auth.login()
    data = {"expected_updated_at": member.updated_at, **form}
    response = _post(client, "/users/role/member", **data)
    assert response.status_code == 400 and message in _field_error(_text(response), "user-role")
    assert _user(app, "member") == member and _audit(app) == []


def test_last_admin_cannot_be_demoted(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    admin = _user(app, "admin")
    response = _post(client, "/users/role/admin", role="operator", expected_updated_at=admin.updated_at)
    page = _text(response)
    assert response.status_code == 400
    assert "is the last enabled admin" in _field_error(page, "user-role") and "Nothing was changed" in page
    assert _user(app, "admin") == admin and _audit(app) == []
    # with a second admin, either may step down -- but then the other is the last one
    second = _add(app, "second", "admin")
    assert _post(client, "/users/role/second", role="viewer", expected_updated_at=second.updated_at).status_code \
        == 303
    response = _post(client, "/users/role/admin", role="viewer", expected_updated_at=admin.updated_at)
    assert response.status_code == 400 and "last enabled admin" in _field_error(_text(response), "user-role")
    assert _user(app, "admin").role == "admin"


def test_an_admin_may_step_down_while_another_stays(app: Flask, client: FlaskClient, auth: Auth) -> None:
    _add(app, "second", "admin")
    auth.login()
    admin = _user(app, "admin")
    response = _post(client, "/users/role/admin", role="operator", expected_updated_at=admin.updated_at)
    assert response.status_code == 303 and response.headers["Location"] == "/"  # its own page is closed now
    assert "admin is now operator." in _flashes(client, "/")
    assert client.get("/users/").status_code == 403 and _user(app, "second").role == "admin"


def test_a_disabled_admin_does_not_count(app: Flask, client: FlaskClient, auth: Auth) -> None:
    dormant = _add(app, "dormant", "admin")
    auth.login()
    assert _post(client, "/users/disable/dormant", expected_updated_at=dormant.updated_at).status_code == 303
    admin = _user(app, "admin")
    response = _post(client, "/users/role/admin", role="operator", expected_updated_at=admin.updated_at)
    assert response.status_code == 400 and _user(app, "admin").role == "admin"


# --- disable / enable -----------------------------------------------------------------------------


def test_disable_ends_the_session_and_enable_lets_them_back(app: Flask, client: FlaskClient, auth: Auth) -> None:
    member = _add(app, "member", "operator", "member-password")
    other = _second_client(app, "member", "member-password")
    assert other.get("/").status_code == 200
    auth.login()
    assert 'data-confirm="Disable member?' in _text(client.get("/users/manage/member"))
    response = _post(client, "/users/disable/member", expected_updated_at=member.updated_at)
    assert response.status_code == 303 and "member is disabled" in _flashes(client, "/users/manage/member")
    disabled = _user(app, "member")
    assert disabled.disabled
    ended = other.get("/")  # the existing session stops working at its next request
    assert ended.status_code == 302 and ended.headers["Location"].startswith("/login")
    assert other.get("/", headers={"HX-Request": "true"}).status_code == 401
    assert Auth(app.test_client()).login("member", "member-password").status_code == 401
    response = _post(client, "/users/enable/member", expected_updated_at=disabled.updated_at)
    assert response.status_code == 303 and not _user(app, "member").disabled
    assert Auth(app.test_client()).login("member", "member-password").status_code == 302
    entries = {e.action: e for e in _audit(app)}
    assert (entries["user.disable"].before, entries["user.disable"].after) == ({"disabled": False},
                                                                              {"disabled": True})
    assert (entries["user.enable"].before, entries["user.enable"].after) == ({"disabled": True},
                                                                            {"disabled": False})
    assert entries["user.disable"].target == entries["user.enable"].target == "member"


def test_an_admin_cannot_disable_themselves(app: Flask, client: FlaskClient, auth: Auth) -> None:
    _add(app, "second", "admin")  # not the last admin: still refused
    auth.login()
    admin = _user(app, "admin")
    page = _text(client.get("/users/manage/admin"))
    assert "You cannot disable your own account." in page and "/users/disable/admin" not in page
    response = _post(client, "/users/disable/admin", expected_updated_at=admin.updated_at)
    assert response.status_code == 400
    assert "You cannot disable your own account." in _field_error(_text(response), "user-disabled")
    assert _user(app, "admin") == admin and _audit(app) == []
    assert client.get("/users/").status_code == 200  # still logged in


def test_stale_disable_is_a_conflict(app: Flask, client: FlaskClient, auth: Auth) -> None:
    member = _add(app, "member", "viewer")
    _accounts(app).set_role("member", "operator", member.updated_at)  # someone else's change meanwhile
    before = _state(app)
    auth.login()
    response = _post(client, "/users/disable/member", expected_updated_at=member.updated_at)
    assert response.status_code == 303
    assert f"User member {CONFLICT_TEXT}" in _flashes(client, "/users/manage/member")
    assert _state(app) == before and _audit(app) == []
    missing = _post(client, "/users/disable/member")
    assert missing.status_code == 400 and "missing the user's version" in _field_error(_text(missing),
                                                                                      "user-disabled")
    assert _state(app) == before


# --- password -------------------------------------------------------------------------------------


def test_reset_password(app: Flask, client: FlaskClient, auth: Auth) -> None:
    member = _add(app, "member", "viewer", "old-password")
    auth.login()
    response = _post(client, "/users/password/member", password=NEW_PASSWORD, confirm=NEW_PASSWORD,
                     expected_updated_at=member.updated_at)
    assert response.status_code == 303
    assert "The password of member was reset; their open sessions have ended." in _flashes(
        client, "/users/manage/member")
    assert Auth(app.test_client()).login("member", "old-password").status_code == 401
    assert Auth(app.test_client()).login("member", NEW_PASSWORD).status_code == 302
    [entry] = _audit(app, "user.password")
    assert (entry.actor, entry.target, entry.before, entry.after) == ("admin", "member", None,
                                                                     {"password_reset": True})


@pytest.mark.parametrize(("form", "element", "message"), [
    ({"password": "short", "confirm": "short"}, "user-password", "Must have at least 8 characters"),
    ({"password": NEW_PASSWORD, "confirm": "something-else"}, "user-confirm", "Must repeat the password exactly"),
    ({"password": NEW_PASSWORD, "confirm": NEW_PASSWORD, "expected_updated_at": ""}, "user-password",
     "missing the user's version"),
])
def test_bad_password_reset_stores_nothing(app: Flask, client: FlaskClient, auth: Auth, form: dict[str, Any],
                                           element: str, message: str) -> None:
    member = _add(app, "member", "viewer")
    auth.login()
    response = _post(client, "/users/password/member", **{"expected_updated_at": member.updated_at, **form})
    page = _text(response)
    assert response.status_code == 400 and message in _field_error(page, element)
    assert (_value(page, "user-password"), _value(page, "user-confirm")) == (form["password"], form["confirm"])
    assert _user(app, "member") == member and _audit(app) == []


def test_stale_password_reset_is_a_conflict(app: Flask, client: FlaskClient, auth: Auth) -> None:
    member = _add(app, "member", "viewer", "old-password")
    _accounts(app).set_role("member", "operator", member.updated_at)
    auth.login()
    response = _post(client, "/users/password/member", password=NEW_PASSWORD, confirm=NEW_PASSWORD,
                     expected_updated_at=member.updated_at)
    assert response.status_code == 303 and CONFLICT_TEXT in _flashes(client, "/users/manage/member")
    assert check_password_hash(_user(app, "member").password_hash, "old-password") and _audit(app) == []


# --- the audit trail keeps no secret --------------------------------------------------------------


def test_audit_trail_never_holds_a_password_or_hash(app: Flask, client: FlaskClient, auth: Auth) -> None:
    auth.login()
    typed = ["first-Pass-word1", "second-Pass-word2", "third-Pass-word3"]
    assert _post(client, "/users/new", name="member", role="viewer", password=typed[0],
                 confirm=typed[0]).status_code == 303
    hashes = [_user(app, "member").password_hash]
    for password in typed[1:]:
        version = _user(app, "member").updated_at
        assert _post(client, "/users/password/member", password=password, confirm=password,
                     expected_updated_at=version).status_code == 303
        hashes.append(_user(app, "member").password_hash)
    steps: list[tuple[str, dict[str, Any]]] = [("role", {"role": "operator"}), ("disable", {}), ("enable", {})]
    for action, form in steps:
        version = _user(app, "member").updated_at
        assert _post(client, f"/users/{action}/member", expected_updated_at=version, **form).status_code == 303
    entries = _audit(app)
    assert sorted(e.action for e in entries) == sorted(["user.create", "user.password", "user.password", "user.role",
                                                        "user.disable", "user.enable"])
    stored = json.dumps([[e.actor, e.action, e.target, e.before, e.after, e.reason] for e in entries])
    audit_page = _text(client.get("/audit/"))
    for secret in [*typed, *hashes, ADMIN_PASSWORD, _user(app, "admin").password_hash]:
        assert secret not in stored and secret not in audit_page
    for hashed in hashes:  # nor any recognisable piece of a hash (its salt or digest)
        for piece in hashed.split("$")[1:]:
            assert piece not in stored


def test_an_admin_gives_a_role_in_a_team_and_takes_the_global_role_away(app: Flask, client: FlaskClient,
                                                                       auth: Auth) -> None:
    vic = _add(app, "vic", "viewer")
    other = app.test_client()
    assert Auth(other).login("vic", "vic-password").status_code == 302
    auth.login()
    done = _post(client, "/users/team-role/vic", team="default", role="operator", expected_updated_at=vic.updated_at)
    assert done.status_code == 303
    assert _accounts(app).grants("vic") == {"default": "operator"}
    assert other.get("/").status_code == 302  # her sessions ended, as for a role change
    vic = _user(app, "vic")
    done = _post(client, "/users/role/vic", role="none", expected_updated_at=vic.updated_at)
    assert done.status_code == 303 and _user(app, "vic").role is None
    page = _text(client.get("/users/manage/vic"))
    assert "default: operator" in page
    assert "none" in _text(client.get("/users/"))
    entries = [(e.action, e.before, e.after) for e in _audit(app) if e.target == "vic"]
    assert ("user.team_role", {"teams": {}}, {"teams": {"default": "operator"}}) in entries
    assert ("user.role", {"role": "viewer"}, {"role": None}) in entries


@pytest.mark.parametrize(("form", "says"), [({"team": "payments", "role": "admin"}, "No team 'payments'"),
                                            ({"team": "default", "role": "root"}, "one of viewer, operator")])
def test_a_team_role_that_cannot_be_is_refused_by_name_and_changes_nothing(
        app: Flask, client: FlaskClient, auth: Auth, form: dict[str, str], says: str) -> None:
    vic = _add(app, "vic", "viewer")
    auth.login()
    refused = _post(client, "/users/team-role/vic", expected_updated_at=vic.updated_at, **form)
    assert refused.status_code == 400 and says in _field_error(_text(refused), "user-team_role")
    assert _accounts(app).grants("vic") == {} and _user(app, "vic").updated_at == vic.updated_at
