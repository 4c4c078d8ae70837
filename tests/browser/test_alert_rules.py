"""An admin makes an alert rule in the browser, sends a test alert and sees how its delivery went."""

from __future__ import annotations

from typing import Any

from scheduler_core.db import close_engine, create_engine
from scheduler_core.reach import Reach
from tests.browser.conftest import Dashboard, Screens, login


def _template(dashboard: Dashboard) -> None:
    """A stored template for alerts on the dashboard's webhook provider."""
    engine = create_engine(dashboard.database_url)
    try:
        reach = Reach(engine, dashboard.reach_config, node_id="browser-test", auto_migrate=False)
        reach.init()
        try:
            if reach.templates.stored_one("alert-text") is None:
                reach.templates.create("alert-text", "webhook", "{summary} -- {link}")
        finally:
            reach.close()
    finally:
        close_engine(engine)


def test_make_a_rule_and_send_a_test_alert(page: Any, dashboard: Dashboard, shot: Screens) -> None:
    _template(dashboard)
    login(page, dashboard)
    page.goto(dashboard("/notifications/alerts/"))
    shot(page, "alerts-empty")
    page.get_by_role("link", name="New rule").click()
    page.get_by_label("Name").fill("ops-failures")
    page.get_by_label("execution.failed").check()
    page.get_by_label("Template", exact=True).select_option("alert-text")
    page.get_by_label("To (in the provider's terms").fill("ops-channel")
    page.get_by_label("Tasks (optional glob").fill("nothing-matches-*")
    page.get_by_label("Throttle").fill("0")
    page.get_by_role("button", name="Create").click()
    error = page.locator("#throttle_s-error")
    assert "between 1000" in error.inner_text()  # refused on its field, the typed values kept
    assert page.get_by_label("Name").input_value() == "ops-failures"
    shot(page, "rule-error")
    page.get_by_label("Throttle").fill("60")
    page.get_by_role("button", name="Create").click()
    page.wait_for_url("**/notifications/alerts/")
    row = page.get_by_role("row").filter(has_text="ops-failures")
    assert "matches no task now" in row.inner_text()
    shot(page, "rule-created")
    row.get_by_role("button", name="Send test alert").click()
    page.wait_for_url("**/notifications/alerts/")
    assert page.locator(".flash").filter(has_text="Test alert of ops-failures").count() == 1
    sent = page.get_by_role("row").filter(has_text="ops-failures").filter(has_text="dead")
    assert sent.count() >= 1  # the webhook refuses it (400): dead at once, and the page says so
    shot(page, "test-alert")
    page.goto(dashboard("/audit/?action=alert_rule.test"))
    assert page.get_by_text("ops-failures").count() >= 1
