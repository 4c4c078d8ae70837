"""``type: aliyun-sms``: Alibaba Cloud SMS (Dysmsapi ``SendSms``, RPC signature version 1.0).

One signed GET per delivery; SendSms has no idempotency key, so every failure after connecting is
started. Config, signing and the result-code classification: docs/executors-and-providers.md.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from scheduler_core.masking import MASK
from scheduler_core.reach.base import Delivery, RenderedMessage
from scheduler_core.reach.providers._config import (
    Settings,
    has_unprintable,
    is_phone,
    mask_endpoint,
    refuse_recipient,
)
from scheduler_core.reach.providers._delivery import (
    ambiguous,
    budget_ms,
    delivered,
    new_message_id,
    no_time_left,
    not_started,
)
from scheduler_core.reach.providers._http import TRANSIENT_STATUSES, HttpAnswer, no_answer, request_json

SETTINGS = ("access_key_id", "access_key_secret", "sign_name", "template_code", "region_id", "endpoint",
            "timeout_ms")
DEFAULT_ENDPOINT = "https://dysmsapi.aliyuncs.com/"
DEFAULT_REGION = "cn-hangzhou"
TRANSIENT_CODES = frozenset({"isv.BUSINESS_LIMIT_CONTROL", "isv.DAY_LIMIT_CONTROL", "isv.AMOUNT_NOT_ENOUGH",
                             "ServiceUnavailable", "InternalError", "SignatureNonceUsed"})


def percent_encode(value: str) -> str:
    """RFC 3986 percent-encoding of UTF-8 text, as Alibaba Cloud's signature wants it.

    ``quote`` with only ``~`` safe already leaves exactly the unreserved characters and writes
    ``%20`` for a space and ``%2A`` for ``*``: the ``+``/``*``/``%7E`` fix-ups of the Java recipe
    (which starts from form encoding) have nothing left to do.
    """
    return quote(value, safe="~")


def canonical_query(params: Mapping[str, str]) -> str:
    return "&".join(f"{percent_encode(key)}={percent_encode(params[key])}" for key in sorted(params))


def signature(params: Mapping[str, str], secret: str, method: str = "GET") -> str:
    string_to_sign = f"{method}&{percent_encode('/')}&{percent_encode(canonical_query(params))}"
    digest = hmac.new(f"{secret}&".encode(), string_to_sign.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


class InvalidMessage(ValueError):
    """The message cannot make a valid SendSms request (nothing is sent)."""


def _template_param(message: RenderedMessage) -> str:
    value = message.extra.get("template_param")
    if value is None:
        value = {"content": message.body}
    if not isinstance(value, Mapping):
        raise InvalidMessage("message.extra['template_param'] must be a mapping")
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"template_param is not JSON-encodable ({type(exc).__name__})") from None


def is_transient_code(code: str) -> bool:
    if code.startswith("isp."):  # the gateway's own faults, except a permission it will never grant
        return code != "isp.RAM_PERMISSION_DENY"
    return code.startswith("Throttling") or code in TRANSIENT_CODES


@dataclass(eq=False)
class AliyunSmsProvider:
    """Sends each message as one Alibaba Cloud ``SendSms`` call (docs/executors-and-providers.md)."""

    name: str
    access_key_id: str = field(repr=False)
    access_key_secret: str = field(repr=False)
    sign_name: str
    template_code: str | None = None
    region_id: str = DEFAULT_REGION
    endpoint: str = field(default=DEFAULT_ENDPOINT, repr=False)  # may hold credentials
    timeout_ms: int = 30_000
    type: str = field(default="aliyun-sms", init=False)
    idempotent: bool = field(default=False, init=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> AliyunSmsProvider:
        return cls(name=settings.name, access_key_id=settings.required_text("access_key_id", 128),
                   access_key_secret=settings.required_text("access_key_secret", 256),
                   sign_name=settings.required_text("sign_name", 64),
                   template_code=settings.text("template_code", max_length=128),
                   region_id=settings.text("region_id", default=DEFAULT_REGION, max_length=64) or DEFAULT_REGION,
                   endpoint=settings.http_url("endpoint", DEFAULT_ENDPOINT), timeout_ms=settings.timeout_ms())

    def validate_recipient(self, to: str) -> None:
        if not isinstance(to, str) or not is_phone(to):
            refuse_recipient(self.name, "a phone number: an optional + and 6 to 15 digits")

    def request_params(self, message: RenderedMessage) -> dict[str, str]:
        """The unsigned SendSms parameters; InvalidMessage when the message cannot make a valid request."""
        template_code = message.extra.get("template_code", self.template_code)
        if not isinstance(template_code, str) or not template_code or has_unprintable(template_code):
            raise InvalidMessage("no template_code: set message.extra['template_code'] or the provider's")
        return {
            "AccessKeyId": self.access_key_id, "Action": "SendSms", "Format": "JSON",
            "PhoneNumbers": message.to, "RegionId": self.region_id, "SignName": self.sign_name,
            "SignatureMethod": "HMAC-SHA1", "SignatureNonce": str(uuid.uuid4()), "SignatureVersion": "1.0",
            "TemplateCode": template_code, "TemplateParam": _template_param(message),
            "Timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "Version": "2017-05-25",
        }

    def signed_url(self, params: Mapping[str, str]) -> str:
        query = f"Signature={percent_encode(signature(params, self.access_key_secret))}&{canonical_query(params)}"
        return f"{self.endpoint}{'&' if '?' in self.endpoint else '?'}{query}"

    def send(self, message: RenderedMessage, idempotency_key: str | None, timeout_ms: int) -> Delivery:
        if not isinstance(message.to, str) or not is_phone(message.to):
            return not_started("invalid_message", "invalid recipient")
        try:
            params = self.request_params(message)
        except InvalidMessage as exc:
            return not_started("invalid_message", str(exc))
        budget = budget_ms(self.timeout_ms, timeout_ms)
        if budget is None:
            return no_time_left()
        answer = request_json("GET", self.signed_url(params), timeout_ms=budget,
                              scrub=[self.access_key_secret, message.to])
        return _judge(answer, budget)

    def snapshot(self) -> dict[str, Any]:
        # The key id is masked too: secrets.is_secret_name says so for anything named "key".
        return {"name": self.name, "type": self.type, "access_key_id": MASK, "access_key_secret": MASK,
                "sign_name": self.sign_name, "template_code": self.template_code, "region_id": self.region_id,
                "endpoint": mask_endpoint(self.endpoint), "timeout_ms": self.timeout_ms}


def _judge(answer: HttpAnswer, budget: int) -> Delivery:
    status = answer.status
    if status is None:
        return no_answer(answer, budget)
    data = answer.data if isinstance(answer.data, dict) else {}
    code = data.get("Code")  # Code and the ids only: the answer's Message text can quote the number
    code = code[:100] if isinstance(code, str) and code.isprintable() else None
    if 200 <= status < 300 and code == "OK":
        message_id = data.get("BizId") or data.get("RequestId")
        return delivered(str(message_id)[:256] if message_id else new_message_id())
    said = f"HTTP {status}" + (f", Code {code}" if code else ", no result code")
    if status >= 500 or status in TRANSIENT_STATUSES or (code and is_transient_code(code)):
        return ambiguous("transient_failure", f"aliyun-sms did not send ({said})")
    if code is None and 200 <= status < 300:
        return ambiguous("transient_failure", f"aliyun-sms answer unreadable ({said})")
    return ambiguous("permanent_rejection", f"aliyun-sms refused ({said})")
