"""What an htmx request asks for: answered here once, for every blueprint.

htmx marks its requests with ``HX-Request``. A boosted link or form (``hx-boost``) sends
``HX-Boosted`` too and swaps in the whole page, so it wants the page like a plain request; any
other htmx request wants the fragment it targets. htmx swaps 2xx answers only: content with
errors in it answers 200 to htmx (a 4xx would leave the page as it was) and 400 to a plain request.
"""

from __future__ import annotations

from flask import Response, make_response, request


def is_htmx() -> bool:
    """The request comes from htmx: a fragment swap, or a boosted link or form."""
    return bool(request.headers.get("HX-Request"))


def wants_fragment() -> bool:
    """htmx asks for a part of the page (a boosted request wants the whole page)."""
    return is_htmx() and not request.headers.get("HX-Boosted")


def page_or_fragment(page: str, fragment: str) -> str:
    """The template to render: the fragment for an htmx swap, else the full page."""
    return fragment if wants_fragment() else page


def error_status(status: int = 400) -> int:
    """The status of an answer that shows errors: ``status``, or 200 when htmx must swap it in."""
    return 200 if is_htmx() else status


def shown_again(body: str, status: int = 400) -> Response:
    """A form shown again with its errors: ``status`` to a plain request; to htmx 200, and the
    address bar stays on the page the form came from."""
    response = make_response(body, error_status(status))
    if is_htmx():
        response.headers["HX-Push-Url"] = "false"
    return response
