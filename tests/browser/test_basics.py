"""Signing in and the read-only pages, in a real browser (no script errors, no CSP violations)."""

from __future__ import annotations

import re
from typing import Any

from tests.browser.conftest import Dashboard, Screens, login


def test_login_then_every_page_renders_without_errors(page: Any, dashboard: Dashboard, shot: Screens) -> None:
    page.goto(dashboard("/executions/"))
    page.wait_for_url(re.compile(r".*/login.*"))  # no page without login
    shot(page, "login")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("wrong password")
    page.get_by_role("button", name="Sign in").click()
    assert "wrong password" in page.content()
    login(page, dashboard)
    shot(page, "overview")
    nav = page.get_by_role("navigation", name="Main")
    for label in ("Tasks", "Executions", "Logs", "Notifications", "Nodes", "Audit", "Users"):
        link = nav.get_by_role("link", name=label, exact=True)
        if link.count() == 0:
            continue
        link.click()
        page.wait_for_load_state("networkidle")
        assert page.get_by_role("heading", level=1).count() >= 1
        shot(page, label.lower())
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(re.compile(r".*/login.*"))
