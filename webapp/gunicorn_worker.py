"""The gthread worker ``hai-scheduler serve`` runs (webapp/gunicorn_conf.py), answering a request
line longer than gunicorn reads (``limit_request_line``, 4094 bytes) as the API answers every
refusal: 414 with RFC 9457 problem details, where gunicorn writes an HTML page. The line was
never parsed, so its path is unknown: a page's too-long link gets the same small JSON answer.
Every other error is gunicorn's own handling."""

from __future__ import annotations

import json
from typing import Any

from gunicorn.http.errors import LimitRequestLine
from gunicorn.util import write_nonblock
from gunicorn.workers.gthread import ThreadWorker

URI_TOO_LONG_CODE = "hai:api:414"


def uri_too_long(detail: str) -> bytes:
    """The whole HTTP answer: 414 and a problem, the connection closed (the rest of the line is unread)."""
    body = json.dumps({"type": f"urn:hai-scheduler:problem:{URI_TOO_LONG_CODE}", "title": "URI Too Long",
                       "status": 414, "detail": detail, "code": URI_TOO_LONG_CODE, "field": None}).encode()
    head = ("HTTP/1.1 414 URI Too Long\r\nConnection: close\r\nContent-Type: application/problem+json\r\n"
            f"Cache-Control: no-store\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


class ProblemWorker(ThreadWorker):  # type: ignore[misc]  # gunicorn has no type information
    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        if not isinstance(exc, LimitRequestLine):
            super().handle_error(req, client, addr, exc)
            return
        self.log.warning("Invalid request from ip=%s: %s", (addr or ("",))[0], exc)
        detail = f"{exc}: send long values in a JSON body"
        try:
            write_nonblock(client, uri_too_long(detail))
        except Exception:  # the client is gone: nothing to answer (as gunicorn's own handle_error)
            self.log.debug("Failed to send error message.")
