"""Login, roles, CSRF, security headers: no page without login except /healthz."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from tests.webapp.conftest import Auth, csrf_token
from webapp.node import accounts_of


def test_healthz_answers_without_login(client: FlaskClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json["status"] == "ok"


def test_pages_need_a_login(client: FlaskClient) -> None:
    response = client.get("/")
    assert response.status_code == 302 and response.headers["Location"].startswith("/login?next=/")
    fragment = client.get("/", headers={"HX-Request": "true"})
    assert fragment.status_code == 401 and fragment.headers["HX-Redirect"] == "/login"


def test_login_logout_and_security_headers(client: FlaskClient, auth: Auth) -> None:
    response = auth.login()
    assert response.status_code == 302 and response.headers["Location"] == "/"
    page = client.get("/")
    assert page.status_code == 200 and "Overview" in page.get_data(as_text=True)
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert page.headers["X-Frame-Options"] == "DENY" and page.headers["X-Content-Type-Options"] == "nosniff"
    assert "HX-Request" in page.headers["Vary"]
    cookie = client.get_cookie("session")
    assert cookie is not None and cookie.http_only and cookie.same_site == "Lax"
    assert auth.logout().status_code == 302
    assert client.get("/").status_code == 302


def test_wrong_password_then_throttle(client: FlaskClient, auth: Auth) -> None:
    for _ in range(5):
        response = auth.login(password="wrong password")
        assert response.status_code == 401 and "wrong password" in response.get_data(as_text=True)
    assert auth.login().status_code == 429  # even the right password waits now


def test_post_without_csrf_token_is_refused(client: FlaskClient, auth: Auth) -> None:
    assert auth.login().status_code == 302
    refused = client.post("/logout")
    assert refused.status_code == 400
    htmx = client.post("/logout", headers={"HX-Request": "true"})
    assert htmx.status_code == 400 and htmx.headers["HX-Refresh"] == "true"
    assert client.get("/").status_code == 200  # still logged in


def test_no_open_redirect_after_login(client: FlaskClient, auth: Auth) -> None:
    response = auth.login(next="//evil.example/steal")
    assert response.headers["Location"] == "/"


def test_disabled_or_unknown_users_cannot_log_in(app: Flask, auth: Auth) -> None:
    accounts_of(app).create("viewer1", "viewer", generate_password_hash("pw-viewer-1"))
    assert auth.login("viewer1", "pw-viewer-1").status_code == 302
    assert auth.login("nobody", "whatever1").status_code == 401


def test_secret_key_is_generated_once_beside_the_database(app: Flask, tmp_path: Path) -> None:
    key_file = tmp_path / "dash.db.secret-key"
    assert key_file.exists() and stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert app.config["SECRET_KEY"] == key_file.read_text().strip()


def test_a_password_reset_or_a_disable_ends_open_sessions_for_good(app: Flask, client: FlaskClient,
                                                                     auth: Auth) -> None:
    users = accounts_of(app)
    users.create("carol", "operator", generate_password_hash("carol-pw-1"))
    assert auth.login("carol", "carol-pw-1").status_code == 302 and client.get("/").status_code == 200
    users.set_password("carol", generate_password_hash("carol-pw-2"))  # e.g. reset by an admin
    assert client.get("/").status_code == 302  # the old session is over
    users.set_password("carol", generate_password_hash("carol-pw-1"))
    assert client.get("/").status_code == 302  # and stays over, even with the old password back
    assert auth.login("carol", "carol-pw-1").status_code == 302 and client.get("/").status_code == 200
    carol = users.get("carol")
    assert carol is not None
    users.set_disabled("carol", True, carol.updated_at)
    assert client.get("/").status_code == 302
    carol = users.get("carol")
    assert carol is not None
    users.set_disabled("carol", False, carol.updated_at)
    assert client.get("/").status_code == 302  # re-enabling does not revive the session


def test_create_user_refuses_bad_names_and_short_passwords(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {**os.environ, "HAI_DATABASE_URL": f"sqlite:///{tmp_path}/cli.db"}
    for name, password, message in (("bad name!", "long enough pw", "name"), ("dave", "short", "HAI_NEW_PASSWORD")):
        done = subprocess.run([sys.executable, "-m", "webapp.cli", "create-user", name, "--role", "viewer"],
                              capture_output=True, text=True, timeout=120, env={**env, "HAI_NEW_PASSWORD": password})
        assert done.returncode == 1 and done.stderr.startswith(f"error: hai:scheduler:012 {message}: "), done.stderr
        assert "Traceback" not in done.stderr


def test_after_login_a_local_next_page_is_kept_and_any_other_target_is_not(app: Flask) -> None:
    for target, landing in (("/tasks/?q=nightly", "/tasks/?q=nightly"), ("/logs/", "/logs/"),
                            ("//evil.example/steal", "/"), ("https://evil.example/", "/"), ("tasks", "/")):
        response = Auth(app.test_client()).login(next=target)
        assert response.headers["Location"] == landing, target


def test_the_throttle_counts_failures_per_address_and_name(app: Flask) -> None:
    """An address that keeps failing is held back; another address, or another name, is not."""
    noisy = app.test_client()
    noisy.environ_base["REMOTE_ADDR"] = "192.0.2.10"
    for _ in range(5):
        assert Auth(noisy).login(password="wrong password").status_code == 401
    assert Auth(noisy).login().status_code == 429
    elsewhere = app.test_client()
    elsewhere.environ_base["REMOTE_ADDR"] = "192.0.2.20"
    assert Auth(elsewhere).login().status_code == 302
    accounts_of(app).create("dave", "viewer", generate_password_hash("dave-pw-1"))
    assert Auth(noisy).login("dave", "dave-pw-1").status_code == 302


def test_every_password_reset_ends_the_sessions_opened_before_it(app: Flask) -> None:
    """Six rounds: the session's credential must equal the current one, which no ordering of two
    fingerprints can stand in for."""
    users = accounts_of(app)
    users.create("erin", "viewer", generate_password_hash("erin-pw-0"))
    for round_ in range(1, 7):
        client = app.test_client()
        assert Auth(client).login("erin", f"erin-pw-{round_ - 1}").status_code == 302
        assert client.get("/").status_code == 200
        users.set_password("erin", generate_password_hash(f"erin-pw-{round_}"))
        assert client.get("/").status_code == 302, f"round {round_}: the session outlived the reset"


def test_htmx_answers_are_never_cached_even_on_public_pages(client: FlaskClient) -> None:
    fragment = client.get("/login", headers={"HX-Request": "true"})
    assert fragment.headers["Cache-Control"] == "no-store" and "HX-Request" in fragment.headers["Vary"]


def test_the_sign_in_page_is_never_cached(client: FlaskClient) -> None:
    """Its CSRF token and its error are for one browser, once: no cache or back button keeps them."""
    assert client.get("/login").headers["Cache-Control"] == "no-store"
    refused = client.post("/login", data={"username": "admin", "password": "wrong", "csrf_token": csrf_token(client)})
    assert refused.status_code == 401 and refused.headers["Cache-Control"] == "no-store"
    assert "Cache-Control" not in client.get("/healthz").headers


def test_the_users_page_is_in_the_menu_of_admins_only(app: Flask, client: FlaskClient, auth: Auth) -> None:
    everyone = ("Overview", "Tasks", "Executions", "Logs", "Notifications", "Nodes", "Audit")
    accounts_of(app).create("frank", "operator", generate_password_hash("frank-pw-1"))
    for name, password, sees_users in (("frank", "frank-pw-1", False), ("admin", None, True)):
        auth.login(name, password) if password else auth.login()
        page = client.get("/").get_data(as_text=True)
        menu = re.findall(r'<a[^>]*href="(/[a-z]*/?)"[^>]*>\s*([A-Z][a-z]+)\s*</a>', page)
        labels = {label for _href, label in menu}
        assert set(everyone) <= labels, (name, labels)
        assert ("Users" in labels) == sees_users, name
        auth.logout()
