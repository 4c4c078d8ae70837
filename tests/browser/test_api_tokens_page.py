"""An admin creates an API token on a user's page in a real browser, a client uses it against
the served JSON API (gunicorn, a real HTTP request), and revoking it on the page ends it."""

from __future__ import annotations

import re
from typing import Any

import requests

from tests.browser.conftest import Dashboard, Screens, login


def test_create_use_and_revoke_a_token_on_the_users_page(page: Any, dashboard: Dashboard, shot: Screens) -> None:
    login(page, dashboard)
    page.goto(dashboard("/users/manage/admin"))
    assert page.get_by_role("heading", name="API tokens").is_visible()
    page.get_by_label("Token name").fill("browser-ci")
    page.get_by_label("Expires after (days)").fill("7")
    page.get_by_role("button", name="Create token").click()
    page.wait_for_url(re.compile(r".*/users/tokens/created/admin/[0-9a-f-]{36}$"))  # post/redirect/get
    token = page.locator("[data-token]").inner_text().strip()
    assert re.fullmatch(r"hai_[A-Za-z0-9_-]{43}", token)
    shot(page, "token-shown-once")
    headers = {"Authorization": f"Bearer {token}"}
    answer = requests.get(dashboard("/api/v1/tasks"), headers=headers, timeout=10)
    assert answer.status_code == 200 and answer.json()["rows"] == []
    page.get_by_role("link", name="Back to admin").click()
    assert token not in page.content() and "browser-ci" in page.content()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Revoke").click()
    page.wait_for_load_state("networkidle")
    assert "is revoked" in page.content()
    shot(page, "token-revoked")
    refused = requests.get(dashboard("/api/v1/tasks"), headers=headers, timeout=10)
    assert refused.status_code == 401 and refused.headers["Content-Type"] == "application/problem+json"
