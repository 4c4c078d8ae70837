"""Every page at phone and laptop size, light and dark: no sideways scroll, no serious
accessibility violation (axe-core, vendored), a screenshot each.

The pages are found, not listed: the walk starts at the overview and follows every same-site
link (the main navigation, sub-navigation, detail pages), one page per route shape, so a page
added later is covered as soon as something links to it; the login page and a "not found" page
are checked too. The database holds rows that stretch pages (tests/browser/seed.py): long ids,
long errors, long URLs, a wide audit entry. The Logs page's refresh must not move the reader.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.browser.conftest import Dashboard, login, screenshot_dir
from tests.browser.seed import seed

AXE = Path(__file__).parent / "vendor" / "axe.min.js"
SIZES = {"1366x900": {"width": 1366, "height": 900}, "390x844": {"width": 390, "height": 844}}
SCHEMES = ("light", "dark")
# Links the walk does not follow: leaving the dashboard, or answers that are not pages.
MISSING = "/tasks/view/no-such-task"  # the error page an operator meets after a stale link
NOT_PAGES = re.compile(r"^/(static|metrics|healthz|login|logout|overview/(chart|counters)|notifications/counts)\b")


@dataclass
class Walk:
    """What the walk saw, per page and per (size, scheme)."""

    pages: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # links that answer an error
    too_wide: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    shots: list[Path] = field(default_factory=list)


def _shape(path: str, ids: set[str]) -> str:
    """The route a path belongs to: seeded ids and anything with a digit stand for any id."""
    parts = [p for p in path.split("/") if p]
    shape = "/" + "/".join("*" if p in ids or re.search(r"[\d_.%]", p) or len(p) > 24 else p for p in parts)
    return shape + "/" if path.endswith("/") and shape != "/" else shape


def _links(page: Any, origin: str) -> list[str]:
    hrefs: list[str] = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
    found = []
    for href in hrefs:
        parts = urlsplit(href)
        if f"{parts.scheme}://{parts.netloc}" != origin or NOT_PAGES.match(parts.path):
            continue
        found.append(parts.path + (f"?{parts.query}" if parts.query else ""))
    return found


def _discover(page: Any, dashboard: Dashboard, ids: set[str], walk: Walk) -> list[str]:
    """Breadth first from the overview; the first link found of each route shape."""
    queue, seen, tried, pages = ["/"], set(), set(), []
    while queue and len(pages) < 60:
        path = queue.pop(0)
        shape = _shape(urlsplit(path).path, ids)
        if shape in seen or path in tried:
            continue
        tried.add(path)
        response = page.goto(dashboard(path))
        if response is None or response.status != 200 or "/login" in page.url:
            walk.broken.append(f"{path}: {response.status if response else 'no answer'} at {page.url}")
            continue
        seen.add(shape)
        pages.append(path)
        queue.extend(_links(page, dashboard.url))
    return pages


def _name(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", path).strip("-")[:60] or "overview"


def _check(page: Any, path: str, label: str, walk: Walk) -> None:
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    if width[0] > width[1]:
        wide = page.evaluate("""() => [...document.querySelectorAll('body *')]
            .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1
                         && !e.closest('.table-wrap, pre'))
            .slice(0, 3).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))""")
        walk.too_wide.append(f"{path} at {label}: {width[0]} px wide in a {width[1]} px window ({wide})")
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    for violation in result["violations"]:
        if violation["impact"] in ("serious", "critical"):
            targets = [" ".join(map(str, node["target"])) for node in violation["nodes"][:3]]
            walk.violations.append(f"{path} at {label}: {violation['id']} ({violation['help']}) {targets}")
    shot = screenshot_dir() / f"screen-{_name(path)}-{label}.png"
    page.screenshot(path=str(shot), full_page=True)
    walk.shots.append(shot)


@pytest.fixture(scope="module")
def seeded(dashboard: Dashboard) -> dict[str, str]:
    return seed(dashboard)


@pytest.fixture(scope="module")
def walk(browser: Any, dashboard: Dashboard, seeded: dict[str, str]) -> Iterator[Walk]:
    ids = set(seeded.values()) | {"admin"}
    result = Walk()
    for size, viewport in SIZES.items():
        for scheme in SCHEMES:
            context = browser.new_context(viewport=viewport, color_scheme=scheme, timezone_id="Europe/Berlin")
            context.set_default_timeout(15_000)
            context.add_init_script(path=AXE)  # through DevTools, not a <script>: the page's CSP stays on
            page = context.new_page()
            page.on("console", lambda m: result.errors.append(m.text) if m.type == "error"
                    and not m.text.startswith("Failed to load resource") else None)
            page.on("pageerror", lambda error: result.errors.append(str(error)))
            try:
                page.goto(dashboard("/login"))
                _check(page, "/login", f"{size}-{scheme}", result)
                login(page, dashboard)
                if not result.pages:
                    result.pages = _discover(page, dashboard, ids, result)
                    # the seeded task with runs: its page draws the duration chart (the walk met another)
                    result.pages.append(f"/tasks/view/{seeded['task']}")
                for path in [*result.pages, MISSING]:
                    page.goto(dashboard(path))
                    _check(page, path, f"{size}-{scheme}", result)
            finally:
                context.close()
    yield result


EXPECTED = ("/", "/tasks/", "/tasks/view/*", "/tasks/edit/*", "/tasks/new", "/tasks/backfill/*", "/executions/",
            "/executions/unknown", "/logs/", "/logs/entry/*", "/logs/failures", "/notifications/",
            "/notifications/dead", "/notifications/unknown", "/notifications/templates", "/notifications/alerts/",
            "/nodes/", "/audit/", "/users/", "/users/manage/*", "/timeline/")


def test_the_walk_reaches_every_page(walk: Walk, dashboard: Dashboard) -> None:
    shapes = {_shape(urlsplit(p).path, {"admin"}) for p in walk.pages}
    missing = [shape for shape in EXPECTED if shape not in shapes]
    assert not missing, f"the walk did not reach {missing}; it saw {sorted(shapes)}"
    assert not walk.broken, f"links that lead to an error: {walk.broken}"


def test_no_page_scrolls_sideways(walk: Walk) -> None:
    assert not walk.too_wide, "\n".join(walk.too_wide)


def test_no_serious_accessibility_violation(walk: Walk) -> None:
    assert not walk.violations, "\n".join(walk.violations)


def test_every_page_is_photographed_at_both_sizes_in_both_themes(walk: Walk) -> None:
    # + the login page and a "not found" page
    assert len(walk.shots) == (len(walk.pages) + 2) * len(SIZES) * len(SCHEMES)
    assert all(shot.stat().st_size > 0 for shot in walk.shots)
    assert not walk.errors, f"the browser reported errors (CSP violations, script errors): {walk.errors}"


POSITIONS = """() => {
  const box = document.querySelector('#rows .table-wrap');
  return {page: window.scrollY, box: box.scrollTop, height: document.documentElement.scrollHeight,
          content: document.querySelector('main').getBoundingClientRect().bottom + window.scrollY};
}"""


@pytest.mark.parametrize("size", SIZES)
def test_the_logs_refresh_keeps_the_reader_in_place(browser: Any, dashboard: Dashboard, seeded: dict[str, str],
                                                    size: str) -> None:
    context = browser.new_context(viewport=SIZES[size])
    try:
        page = context.new_page()
        login(page, dashboard)
        page.goto(dashboard("/logs/"))
        start = page.evaluate(POSITIONS)
        # Nothing hidden (the rows' visually hidden "Details" labels) stretches the page below its content.
        assert start["height"] <= start["content"] + 1, start
        page.evaluate("window.scrollTo(0, 250); document.querySelector('#rows .table-wrap').scrollTop = 400")
        before = page.evaluate(POSITIONS)
        # The rows' box scrolls up and down on its own at laptop size only (on a phone the page does).
        assert before["page"] > 0 and (before["box"] > 0 or size == "390x844"), before
        for _ in range(2):  # two refreshes of the rows, every 5 s
            with page.expect_response(lambda r: "/logs/" in r.url and "hx-request" in r.request.headers,
                                      timeout=15_000):
                pass
            page.wait_for_timeout(500)  # htmx settles the swap
        after = page.evaluate(POSITIONS)
        assert (after["page"], after["box"]) == (before["page"], before["box"]), (before, after)
        assert after["height"] <= after["content"] + 1, after
    finally:
        context.close()


def _luminance(rgb: str) -> float:
    channels = [int(c) / 255 for c in re.findall(r"\d+", rgb)[:3]]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(a: str, b: str) -> float:
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_keyboard_focus_ring_stands_out_in_both_themes(browser: Any, dashboard: Dashboard, scheme: str) -> None:
    """axe does not judge focus rings: the outline must reach 3:1 against what it is drawn on
    (WCAG 1.4.11), on a page's surface and on the top bar."""
    context = browser.new_context(viewport=SIZES["1366x900"], color_scheme=scheme)
    try:
        page = context.new_page()
        login(page, dashboard)
        page.goto(dashboard("/tasks/"))
        colours = page.evaluate("""() => {
            const ring = el => {
                el.focus({focusVisible: true});
                const style = getComputedStyle(el);
                return style.outlineStyle === 'none' ? 'no ring' : style.outlineColor;
            };
            const field = document.querySelector('main input[type="search"], main input:not([type="hidden"])');
            const link = document.querySelector('nav[aria-label="Main"] a');
            return {field: ring(field), surface: getComputedStyle(document.body).backgroundColor,
                    link: ring(link), bar: getComputedStyle(document.querySelector('.topbar')).backgroundColor};
        }""")
        assert "no ring" not in colours.values(), colours
        assert _contrast(colours["field"], colours["surface"]) >= 3, colours
        assert _contrast(colours["link"], colours["bar"]) >= 3, colours
    finally:
        context.close()


@pytest.mark.parametrize("size", SIZES)
def test_the_duration_chart_is_readable(browser: Any, dashboard: Dashboard, seeded: dict[str, str],
                                        size: str) -> None:
    """The task page's chart fits the screen and its labels stay at least 8 px tall."""
    context = browser.new_context(viewport=SIZES[size], color_scheme="dark")
    try:
        page = context.new_page()
        login(page, dashboard)
        page.goto(dashboard(f"/tasks/view/{seeded['task']}"))
        chart = page.locator("figure.chart", has=page.locator("#dur-title"))
        box = chart.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= SIZES[size]["width"]
        heights = page.eval_on_selector_all("figure.chart:has(#dur-title) text.chart-label",
                                            "els => els.map(e => e.getBoundingClientRect().height)")
        assert heights and min(heights) >= 8, heights
        assert page.locator(".dur-cross").count() == 20  # every third of the 60 seeded runs failed
        chart.screenshot(path=str(screenshot_dir() / f"duration-chart-{size}-dark.png"))
    finally:
        context.close()
