"""The page that shows a new API token, in a real browser: reloading it creates no second token
and shows "already shown"; a second token of the same name is refused by name; the revoke
confirmation names the token by its first characters and creation time."""

from __future__ import annotations

import re
from typing import Any

from tests.browser.conftest import Dashboard, Screens, login


def test_a_reload_shows_already_shown_and_creates_nothing(page: Any, dashboard: Dashboard, shot: Screens) -> None:
    login(page, dashboard)
    page.goto(dashboard("/users/manage/admin"))
    page.get_by_label("Token name").fill("reload-check")
    page.get_by_role("button", name="Create token").click()
    page.wait_for_url(re.compile(r".*/users/tokens/created/admin/[0-9a-f-]{36}$"))
    token = page.locator("[data-token]").inner_text().strip()
    page.reload()
    assert page.locator("[data-token]").count() == 0
    assert "already shown" in page.locator("#token-already-shown").inner_text()
    assert token not in page.content()
    shot(page, "token-already-shown")
    page.get_by_role("link", name="Back to admin").click()
    rows = page.locator("tr", has_text="reload-check")
    assert rows.count() == 1 and f"{token[:10]}…" in rows.inner_text()
    page.get_by_label("Token name").fill("reload-check")
    page.get_by_role("button", name="Create token").click()
    assert "already has a token named 'reload-check'" in page.locator("#user-token_name-error").inner_text()
    assert page.get_by_label("Token name").input_value() == "reload-check"
    messages: list[str] = []
    page.once("dialog", lambda dialog: (messages.append(dialog.message), dialog.dismiss()))
    rows.get_by_role("button", name="Revoke").click()
    assert messages and re.fullmatch(rf"Revoke the token \u2068reload-check\u2069 \({re.escape(token[:10])}…, created "
                                     r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\)\? It stops working at once\.", messages[0])
