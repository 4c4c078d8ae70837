"""One time format on every page: the ``when`` and ``ago`` template filters; and one way to put
text someone typed into a page's text, ``bdi`` (``fsi`` in attributes and titles), so that its
direction marks stay inside it.

Every instant on a page is a ``<time>`` element made here, never written by hand in a template:
its ``datetime`` is the ISO-8601 UTC instant, its text the UTC time with the zone named
(``2026-12-01 07:03:54 UTC``), its ``title`` the same UTC time for the hover. ``static/app.js``
rewrites the text into the viewer's zone, zone named (``2026-12-01 08:03:54 CET``), and keeps
the UTC title; without JavaScript the page shows UTC, named. ``ago`` is for the times people
think of as "how long since" (heartbeats): ``3 s ago``, the absolute time on hover.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from flask import Flask
from markupsafe import Markup, escape


def iso(ms: int | None) -> str:
    """Unix ms as an ISO-8601 UTC timestamp (``2026-12-01T07:03:54Z``); "" for None."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def utc_text(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def when(ms: int | None, empty: str = "") -> Markup:
    """``<time datetime=… title="… UTC">… UTC</time>``; ``empty`` (escaped) for None."""
    if ms is None:
        return Markup(escape(empty))
    text = utc_text(ms)
    return Markup('<time datetime="{}" title="{}">{}</time>').format(iso(ms), text, text)


def wall_ms(text: str, zone: ZoneInfo) -> int:
    """Unix ms of a date-time typed in a ``datetime-local`` input (``2026-12-07T09:00``), read as
    the wall time in ``zone`` (the viewer's); one written with an offset keeps it. ValueError
    (or OverflowError) when ``text`` is not a date-time."""
    moment = datetime.fromisoformat(text.strip())
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return int(moment.timestamp() * 1000)


def wall_text(ms: int, zone: ZoneInfo) -> str:
    """``2026-12-07 09:00 CET``: a minute in ``zone``, named, for a message about a typed time."""
    return datetime.fromtimestamp(ms / 1000, zone).strftime("%Y-%m-%d %H:%M %Z")


def span(ms: int | None) -> str:
    """A duration for people: ``850 ms``, ``12.4 s``, ``3 min 5 s``, ``2 h 10 min``; "" for None."""
    if ms is None:
        return ""
    ms = max(int(ms), 0)
    if ms < 1_000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    seconds = ms // 1000
    if seconds < 3_600:
        return f"{seconds // 60} min {seconds % 60} s"
    if seconds < 86_400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86_400} d {seconds % 86_400 // 3600} h"


def ago(ms: int | None, now_ms: int | None, empty: str = "") -> Markup:
    """``<time … data-relative>3 s ago</time>`` measured against ``now_ms`` (the DB clock the
    page was read at); the absolute time stays on hover. ``in 5 s`` for an instant ahead."""
    if ms is None:
        return Markup(escape(empty))
    if now_ms is None:
        return when(ms, empty)
    delta = now_ms - ms
    words = "just now" if abs(delta) < 1_000 else (f"{_whole(delta)} ago" if delta > 0 else f"in {_whole(-delta)}")
    text = utc_text(ms)
    return Markup('<time datetime="{}" title="{}" data-relative>{}</time>').format(iso(ms), text, words)


def _whole(ms: int) -> str:
    seconds = ms // 1000
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7_200:
        return f"{seconds // 60} min"
    if seconds < 172_800:
        return f"{seconds // 3600} h"
    return f"{seconds // 86_400} d"


def bdi(value: object) -> Markup:
    """``<bdi>…</bdi>``: text someone typed (a task id or name, a node id, a user name, a reason)
    isolated from the page's text around it. Without it a right-to-left override (U+202E) in a
    name reverses what follows it on the line: "Invoice\u202eexe.txt" reads "Invoicetxt.exe"."""
    if value is None or value == "":
        return Markup("")
    return Markup("<bdi>{}</bdi>").format(value)


def fsi(value: object) -> str:
    """The same isolation where no element can go (a ``<title>``, a ``data-confirm`` message, a
    ``title`` attribute): the text between FIRST STRONG ISOLATE (U+2068) and POP DIRECTIONAL
    ISOLATE (U+2069). Escaped by the template as usual."""
    if value is None or value == "":
        return ""
    return f"\u2068{value}\u2069"


def install(app: Flask) -> None:
    app.add_template_filter(bdi, "bdi")
    app.add_template_filter(fsi, "fsi")
    app.add_template_filter(iso, "iso")
    app.add_template_filter(when, "when")
    app.add_template_filter(ago, "ago")
    app.add_template_filter(span, "span")
