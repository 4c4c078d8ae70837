"""Resetting a user's password on their page in a real browser: a mismatch shows the form again
with both typed values kept and the error named, and no step breaks the Content-Security-Policy
(the ``page`` fixture fails on any violation) -- even when, as a password manager does, something
has put a style attribute on the fields: an htmx swap of the page would copy it onto the new
fields with setAttribute, which the policy refuses (four violations on the trial's page)."""

from __future__ import annotations

import re
from typing import Any

from tests.browser.conftest import ADMIN_PASSWORD, Dashboard, Screens, login

# What a password manager's content script does to the fields it decorates (CSSOM: allowed).
DECORATE = """for (const id of ['user-password', 'user-confirm', 'token-name', 'token-expires'])
  document.getElementById(id).style.backgroundImage = 'none'"""


def test_a_mismatch_keeps_what_was_typed_without_a_csp_violation(page: Any, dashboard: Dashboard,
                                                                 shot: Screens) -> None:
    login(page, dashboard)
    page.goto(dashboard("/users/manage/admin"))
    page.evaluate(DECORATE)
    page.get_by_label("New password", exact=True).fill("first typed pw 1")
    page.get_by_label("New password again").fill("second typed pw 2")
    page.get_by_role("button", name="Reset password").click()
    page.wait_for_load_state("networkidle")
    assert page.get_by_label("New password", exact=True).input_value() == "first typed pw 1"
    assert page.get_by_label("New password again").input_value() == "second typed pw 2"
    assert "Must repeat the password exactly" in page.locator("#user-confirm-error").inner_text()
    assert page.evaluate("document.activeElement.id") == "user-confirm"  # the cursor on the field in error
    shot(page, "reset-mismatch")
    page.evaluate(DECORATE)
    for label in ("New password", "New password again"):  # the same password again: other tests sign in with it
        page.get_by_label(label, exact=True).fill(ADMIN_PASSWORD)
    page.get_by_role("button", name="Reset password").click()
    page.wait_for_url(re.compile(r".*/users/manage/admin$"))
    assert "The password of admin was reset" in page.content()
    assert page.get_by_label("New password", exact=True).input_value() == ""


def test_a_role_change_on_a_decorated_page_breaks_no_policy(page: Any, dashboard: Dashboard) -> None:
    login(page, dashboard)
    page.goto(dashboard("/users/manage/admin"))
    page.evaluate(DECORATE)
    page.get_by_role("button", name="Change role").click()
    page.wait_for_load_state("networkidle")
    assert "already admin" in page.content()
