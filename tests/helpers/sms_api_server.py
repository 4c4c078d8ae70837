"""Real HTTP servers on 127.0.0.1 that answer JSON: a scripted one, and an Alibaba Cloud SMS stand-in.

:class:`JsonApiServer` records every request (method, path, decoded query, headers, body) and
answers ``answer_status`` / ``answer_body``.

:class:`AliyunSmsServer` plays Dysmsapi ``SendSms``: it checks the request the way the real
gateway does -- required parameters, the access key id, a fresh nonce, the timestamp format and
the HMAC-SHA1 signature, recomputed here from the received parameters and its own copy of the
secret -- and answers ``{"Code": "OK", "BizId": ...}`` or the error code a test chose. The
percent-encoding below is written from RFC 3986 on purpose and shares no code with the provider:
a signature bug on either side shows up as ``SignatureDoesNotMatch``.
"""

from __future__ import annotations

import base64
import calendar
import hashlib
import hmac
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import unquote

_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")
_REQUIRED = ("AccessKeyId", "Action", "Format", "PhoneNumbers", "RegionId", "SignName", "SignatureMethod",
             "SignatureNonce", "SignatureVersion", "TemplateCode", "TemplateParam", "Timestamp", "Version")
_FIXED = {"Action": "SendSms", "Format": "JSON", "SignatureMethod": "HMAC-SHA1", "SignatureVersion": "1.0",
          "Version": "2017-05-25"}


def rfc3986_encode(text: str) -> str:
    """Every UTF-8 byte outside ``A-Z a-z 0-9 - _ . ~`` as ``%XX`` (upper-case hex)."""
    return "".join(chr(byte) if byte in _UNRESERVED else f"%{byte:02X}" for byte in text.encode("utf-8"))


def expected_signature(params: dict[str, str], secret: str, method: str = "GET") -> str:
    canonical = "&".join(f"{rfc3986_encode(key)}={rfc3986_encode(params[key])}" for key in sorted(params))
    string_to_sign = f"{method}&{rfc3986_encode('/')}&{rfc3986_encode(canonical)}"
    digest = hmac.new((secret + "&").encode("utf-8"), string_to_sign.encode("utf-8"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


@dataclass
class ReceivedRequest:
    method: str
    path: str
    query: list[tuple[str, str]]  # decoded, in order, duplicates kept
    headers: dict[str, str]  # lower-cased names
    body: bytes
    verdict: str | None = None  # AliyunSmsServer: "OK" or the refusal code it answered

    @property
    def params(self) -> dict[str, str]:
        return dict(self.query)

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class _Answer:
    status: int = 200
    body: Any = field(default_factory=lambda: {"ok": True})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, owner: JsonApiServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path, _, query = self.path.partition("?")
        pairs = [item.partition("=") for item in query.split("&") if item]
        received = ReceivedRequest(self.command, path, [(unquote(key), unquote(value)) for key, _, value in pairs],
                                   {name.lower(): value for name, value in self.headers.items()}, body)
        self.server.owner.requests.append(received)
        status, answer = self.server.owner.respond(received)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    do_POST = do_GET


class JsonApiServer:
    """Answers every request with the scripted status and JSON body."""

    def __init__(self) -> None:
        self.requests: list[ReceivedRequest] = []
        self.answer = _Answer()
        self._server = _Server(self)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="json-api-server", daemon=True)
        self._thread.start()

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def answer_with(self, status: int, body: Any) -> None:
        self.answer = _Answer(status, body)

    def respond(self, received: ReceivedRequest) -> tuple[int, Any]:
        return self.answer.status, self.answer.body

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


class AliyunSmsServer(JsonApiServer):
    """A SendSms endpoint that verifies every request, then answers ``code`` (``"OK"`` by default)."""

    def __init__(self, access_key_id: str, access_key_secret: str) -> None:
        self.access_key_id = access_key_id
        self.access_key_secret = access_key_secret
        self.code = "OK"
        self.code_status = 200  # the HTTP status that goes with a chosen error code
        self._nonces: set[str] = set()
        self._ids = itertools.count(1)
        super().__init__()

    def refuse(self, code: str, status: int = 200) -> None:
        self.code, self.code_status = code, status

    def _check(self, received: ReceivedRequest) -> str | None:
        """None when the request is one the real gateway would accept; else the gateway's error code."""
        keys = [key for key, _ in received.query]
        params = received.params
        if received.method != "GET" or len(keys) != len(set(keys)):
            return "InvalidParameter"
        if any(not params.get(key) for key in (*_REQUIRED, "Signature")):
            return "MissingParameter"
        if any(params[key] != value for key, value in _FIXED.items()):
            return "InvalidParameter"
        if params["AccessKeyId"] != self.access_key_id:
            return "InvalidAccessKeyId.NotFound"
        try:
            stamp = calendar.timegm(time.strptime(params["Timestamp"], "%Y-%m-%dT%H:%M:%SZ"))
            template_param = json.loads(params["TemplateParam"])
        except ValueError:
            return "InvalidParameter"
        if abs(stamp - time.time()) > 900 or not isinstance(template_param, dict):
            return "InvalidTimeStamp.Expired" if abs(stamp - time.time()) > 900 else "InvalidParameter"
        unsigned = {key: value for key, value in params.items() if key != "Signature"}
        if not hmac.compare_digest(params["Signature"], expected_signature(unsigned, self.access_key_secret)):
            return "SignatureDoesNotMatch"
        if params["SignatureNonce"] in self._nonces:
            return "SignatureNonceUsed"
        self._nonces.add(params["SignatureNonce"])
        return None

    def respond(self, received: ReceivedRequest) -> tuple[int, Any]:
        request_id = f"req-{next(self._ids)}"
        problem = self._check(received)
        if problem is not None:
            received.verdict = problem
            return 400, {"Code": problem, "Message": "refused by the test server", "RequestId": request_id}
        received.verdict = "OK"
        if self.code == "OK":
            return 200, {"Code": "OK", "Message": "OK", "BizId": f"biz-{request_id}", "RequestId": request_id}
        return self.code_status, {"Code": self.code, "Message": "chosen by the test", "RequestId": request_id}
