"""Evidence on screen, in a real browser: times in the viewer's zone with the zone named and UTC
on hover (the page context runs in Europe/Berlin)."""

from __future__ import annotations

import re
from typing import Any

from tests.browser.conftest import Dashboard, Screens, login


def test_times_show_in_the_viewers_zone_named_with_utc_on_hover(page: Any, dashboard: Dashboard,
                                                                shot: Screens) -> None:
    login(page, dashboard)
    page.goto(dashboard("/users/"))
    created = page.locator("time[datetime]").first
    utc = created.get_attribute("datetime")
    text, title = created.inner_text(), created.get_attribute("title")
    # Berlin is UTC+1 in winter (CET) and UTC+2 in summer (CEST): en-GB names both.
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d CES?T", text), text
    assert title == f"{utc[:10]} {utc[11:19]} UTC", (title, utc)
    hour_utc, hour_shown = int(utc[11:13]), int(text[11:13])
    assert (hour_shown - hour_utc) % 24 in (1, 2)
    page.goto(dashboard("/nodes/"))
    heartbeat = page.locator("time[data-relative]").first
    assert re.fullmatch(r"just now|\d+ s ago|\d+ min ago", heartbeat.inner_text())
    assert heartbeat.get_attribute("title").endswith(" UTC)")
    shot(page, "nodes-relative")
