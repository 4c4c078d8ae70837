"""The one answer to "what does this htmx request want?" (webapp.htmx), for each kind of request."""

from __future__ import annotations

import pytest
from flask import Flask

from webapp.htmx import error_status, is_htmx, page_or_fragment, shown_again, wants_fragment

PLAIN: dict[str, str] = {}
SWAP = {"HX-Request": "true"}
BOOSTED = {"HX-Request": "true", "HX-Boosted": "true"}


@pytest.mark.parametrize(("headers", "htmx", "fragment"), [(PLAIN, False, False), (SWAP, True, True),
                                                          (BOOSTED, True, False)])
def test_a_boosted_request_wants_the_page_and_any_htmx_request_gets_a_swappable_status(
        headers: dict[str, str], htmx: bool, fragment: bool) -> None:
    with Flask(__name__).test_request_context(headers=headers):
        assert (is_htmx(), wants_fragment()) == (htmx, fragment)
        assert page_or_fragment("page.html", "_part.html") == ("_part.html" if fragment else "page.html")
        assert error_status() == (200 if htmx else 400)
        again = shown_again("<form></form>", 400)
        assert again.status_code == (200 if htmx else 400)
        assert again.headers.get("HX-Push-Url") == ("false" if htmx else None)
