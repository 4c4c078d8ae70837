"""Notification providers against real servers on 127.0.0.1 (no mocks): an aiosmtpd SMTP server, the
recording HTTP server for webhooks, and an Alibaba Cloud SMS stand-in that verifies signatures on
its own. Also: configuration validation (every bound), recipient rules, masked snapshots, the
console provider's log line and its production guard.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler_core.errors import InvalidRecipientError, ReachConfigError, UnsupportedTypeError
from scheduler_core.reach.base import Delivery, Provider, RenderedMessage
from scheduler_core.reach.providers import build_provider, build_providers
from scheduler_core.reach.providers.sms import signature
from scheduler_core.transport.deadline import WATCHDOG_THREAD
from scheduler_core.transport.exchange import WORKER_THREAD
from tests.helpers.http_server import RecordingServer
from tests.helpers.sms_api_server import AliyunSmsServer, JsonApiServer
from tests.helpers.smtp_server import SmtpServer

SENDER = "noreply@example.com"
RECIPIENT = "alice@example.org"
PHONE = "+8613800138021"
KEY_ID, KEY_SECRET = "LTAI-test-id", "test-secret-Zk9"


def _threads() -> set[str]:
    return {thread.name for thread in threading.enumerate() if thread.name in (WATCHDOG_THREAD, WORKER_THREAD)}


@pytest.fixture(autouse=True)
def _no_watchdog_left() -> Iterator[None]:
    yield
    assert not _threads(), "a deadline watchdog or an HTTP worker outlived its send"


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port that refuses connections: bound, never listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def message(to: str = RECIPIENT, subject: str | None = "Hello", body: str = "Body", **extra: Any) -> RenderedMessage:
    return RenderedMessage(to=to, subject=subject, body=body, extra=extra)


def send(provider: Provider, msg: RenderedMessage, key: str | None = None, timeout_ms: int = 5_000
         ) -> tuple[Delivery, float]:
    started = time.monotonic()
    delivery = provider.send(msg, key, timeout_ms)
    return delivery, time.monotonic() - started


def failed(delivery: Delivery, failure_class: str, started: bool) -> None:
    assert (delivery.sent, delivery.failure_class, delivery.started) == (False, failure_class, started), delivery
    assert delivery.error


# --- SMTP -------------------------------------------------------------------------------


@pytest.fixture
def smtp_server() -> Iterator[SmtpServer]:
    with SmtpServer(users={"robot": "s3cret-pw"}) as server:
        yield server


def smtp(port: int, **settings: Any) -> Provider:
    return build_provider({"name": "mail", "type": "smtp", "host": "127.0.0.1", "port": port, "tls": "none",
                           "from": SENDER, **settings})


def test_smtp_delivers_a_unicode_message_with_its_message_id(smtp_server: SmtpServer) -> None:
    body = "Grüße, 世界!\n.a line starting with a dot\nCode: 123456"
    delivery, _ = send(smtp(smtp_server.port), message(subject="Ihr Code — 验证码", body=body))
    assert delivery.sent and delivery.failure_class is None
    [received] = smtp_server.messages
    assert received.mail_from == SENDER and received.rcpt_tos == [RECIPIENT]
    assert received.message["From"] == SENDER and received.message["To"] == RECIPIENT
    assert received.message["Subject"] == "Ihr Code — 验证码"
    assert received.message["Message-ID"] == delivery.message_id
    assert received.message.get_content_type() == "text/plain"
    assert received.body.rstrip("\n") == body


def test_smtp_logs_in_when_configured(smtp_server: SmtpServer) -> None:
    delivery, _ = send(smtp(smtp_server.port, username="robot", password="s3cret-pw"), message())
    assert delivery.sent
    assert ("robot", True) in smtp_server.logins and len(smtp_server.messages) == 1


def test_smtp_authentication_failure_is_a_permanent_rejection_before_anything_is_handed_over(
        smtp_server: SmtpServer) -> None:
    delivery, _ = send(smtp(smtp_server.port, username="robot", password="wrong-pw"), message(body="secret body"))
    failed(delivery, "permanent_rejection", started=False)
    assert "535" in (delivery.error or "")
    assert "wrong-pw" not in (delivery.error or "") and "secret body" not in (delivery.error or "")
    assert smtp_server.data_attempts == 0 and not smtp_server.messages


def test_smtp_without_auth_on_the_server_is_a_permanent_rejection() -> None:
    with SmtpServer(auth=False) as server:
        delivery, _ = send(smtp(server.port, username="robot", password="s3cret-pw"), message())
    failed(delivery, "permanent_rejection", started=False)


def test_smtp_refused_connection_is_provider_unavailable(closed_port: int) -> None:
    delivery, _ = send(smtp(closed_port), message())
    failed(delivery, "provider_unavailable", started=False)


@pytest.mark.parametrize("tls", ["starttls", "implicit"])
def test_smtp_tls_that_cannot_be_set_up_is_provider_unavailable(smtp_server: SmtpServer, tls: str) -> None:
    # The test server speaks plain SMTP: no STARTTLS offered, and no TLS handshake on connect.
    delivery, _ = send(smtp(smtp_server.port, tls=tls), message())
    failed(delivery, "provider_unavailable", started=False)
    assert smtp_server.data_attempts == 0


@pytest.mark.parametrize(("reply", "failure_class"), [("550 5.1.1 No such user alice@example.org",
                                                       "permanent_rejection"),
                                                      ("450 4.2.1 Mailbox busy", "transient_failure")])
def test_smtp_refused_recipient_is_final_and_not_started(smtp_server: SmtpServer, reply: str,
                                                         failure_class: str) -> None:
    smtp_server.reject_at_rcpt(reply)
    delivery, _ = send(smtp(smtp_server.port), message())
    failed(delivery, failure_class, started=False)  # RCPT refused: the content was never handed over
    assert RECIPIENT not in (delivery.error or "")  # reply texts are not quoted: they repeat the address
    assert smtp_server.data_attempts == 0


@pytest.mark.parametrize(("reply", "failure_class"), [("451 4.3.0 Try again later", "transient_failure"),
                                                      ("554 5.6.0 Message refused", "permanent_rejection")])
def test_smtp_failure_at_data_is_started(smtp_server: SmtpServer, reply: str, failure_class: str) -> None:
    smtp_server.reject_at_data(reply)
    delivery, _ = send(smtp(smtp_server.port), message())
    failed(delivery, failure_class, started=True)
    assert reply[:3] in (delivery.error or "")


def test_smtp_deadline_during_data_is_started_and_on_time(smtp_server: SmtpServer) -> None:
    smtp_server.delay_data(5)
    delivery, took = send(smtp(smtp_server.port), message(), timeout_ms=600)
    failed(delivery, "transient_failure", started=True)
    # Not a timing assertion: the server holds DATA for 5 s; ending well before shows the deadline cut it.
    assert re.search(r"time(d )?out", delivery.error or "", re.IGNORECASE) and took < 4.5


def test_smtp_message_that_cannot_be_an_email_is_invalid_and_not_sent(smtp_server: SmtpServer) -> None:
    provider = smtp(smtp_server.port)
    failed(provider.send(message(subject="Hi\r\nBcc: eve@example.com"), None, 5_000), "invalid_message", False)
    failed(provider.send(message(to="Eve <eve@example.com>"), None, 5_000), "invalid_message", False)
    assert smtp_server.data_attempts == 0


# --- webhook (api) ----------------------------------------------------------------------------


@pytest.fixture
def http_server() -> Iterator[RecordingServer]:
    with RecordingServer() as server:
        yield server


def webhook(url: str, **settings: Any) -> Provider:
    return build_provider({"name": "hook", "type": "api", "url": url, **settings})


def test_webhook_posts_json_and_headers_without_a_key_when_not_idempotent(http_server: RecordingServer) -> None:
    provider = webhook(http_server.url("/echo"), headers={"Authorization": "Bearer t0k", "X-Team": "ops"})
    delivery, _ = send(provider, message(subject="Sub", body="Bödy", channel="ops"), key="queue-1")
    assert delivery.sent and delivery.message_id and delivery.message_id != "queue-1"
    [request] = http_server.requests
    assert request.method == "POST" and request.header("Content-Type") == "application/json"
    assert request.header("Authorization") == "Bearer t0k" and request.header("X-Team") == "ops"
    assert request.json() == {"to": RECIPIENT, "subject": "Sub", "body": "Bödy", "extra": {"channel": "ops"}}
    assert request.count("Idempotency-Key") == 0


def test_idempotent_webhook_sends_the_same_key_in_header_and_body_on_every_try(http_server: RecordingServer) -> None:
    provider = webhook(http_server.url("/echo"), idempotent=True)
    first, _ = send(provider, message(), key="queue-7")
    second, _ = send(provider, message(), key="queue-7")
    assert first.sent and second.sent and first.message_id == "queue-7"
    for request in http_server.requests:
        assert request.header("Idempotency-Key") == "queue-7" and request.json()["idempotencyKey"] == "queue-7"


@pytest.mark.parametrize(("answer", "expected"), [({"messageId": "m-42"}, "m-42"), ({"id": 7}, "7")])
def test_webhook_message_id_comes_from_the_answer(answer: dict[str, Any], expected: str) -> None:
    with JsonApiServer() as server:
        server.answer_with(201, answer)
        delivery, _ = send(webhook(server.url("/notify"), idempotent=True), message(), key="queue-1")
    assert delivery.sent and delivery.message_id == expected


@pytest.mark.parametrize(("status", "failure_class"), [
    (408, "transient_failure"), (425, "transient_failure"), (429, "transient_failure"),
    (500, "transient_failure"), (503, "transient_failure"),
    (400, "permanent_rejection"), (404, "permanent_rejection"), (422, "permanent_rejection"),
    (302, "permanent_rejection"),
])
def test_webhook_statuses_are_classified(http_server: RecordingServer, status: int, failure_class: str) -> None:
    delivery, _ = send(webhook(http_server.url(f"/status/{status}")), message())
    failed(delivery, failure_class, started=True)
    assert delivery.error is not None and delivery.error.startswith(f"HTTP {status}")
    assert "status" not in delivery.error  # the response body ({"status": ...}) is never quoted


def test_webhook_200_is_sent(http_server: RecordingServer) -> None:
    delivery, _ = send(webhook(http_server.url("/status/200")), message())
    assert delivery.sent and delivery.started is False and delivery.failure_class is None


def test_webhook_refused_connection_is_provider_unavailable(closed_port: int) -> None:
    delivery, _ = send(webhook(f"http://127.0.0.1:{closed_port}/hook"), message())
    failed(delivery, "provider_unavailable", started=False)


def test_webhook_dropped_connection_is_started(http_server: RecordingServer) -> None:
    failed(send(webhook(http_server.url("/drop")), message())[0], "transient_failure", started=True)


def test_webhook_deadline_covers_the_whole_request(http_server: RecordingServer) -> None:
    delivery, took = send(webhook(http_server.url("/slow/5"), timeout_ms=1_000), message(), timeout_ms=60_000)
    failed(delivery, "transient_failure", started=True)
    assert "timeout after 1000 ms" in (delivery.error or "") and took < 4.5  # the server answers after 5 s


def test_webhook_2xx_counts_even_when_the_body_trickles_past_the_deadline(http_server: RecordingServer) -> None:
    # The status line is the receiver's verdict; the body is only read for an id, and not past the deadline.
    delivery, took = send(webhook(http_server.url("/trickle/10")), message(), timeout_ms=800)
    assert delivery.sent and took < 8.0  # the body trickles for 10 s: the deadline stopped reading


def test_webhook_refuses_a_message_it_cannot_encode_without_connecting(http_server: RecordingServer) -> None:
    failed(send(webhook(http_server.url("/echo")), message(blob=object()))[0], "invalid_message", False)
    failed(send(webhook(http_server.url("/echo")), message(to="bad\nrecipient"))[0], "invalid_message", False)
    assert not http_server.requests


# --- Alibaba Cloud SMS ------------------------------------------------------------------------


@pytest.fixture
def sms_server() -> Iterator[AliyunSmsServer]:
    with AliyunSmsServer(KEY_ID, KEY_SECRET) as server:
        yield server


def aliyun(endpoint: str, secret: str = KEY_SECRET, **settings: Any) -> Provider:
    return build_provider({"name": "sms", "type": "aliyun-sms", "access_key_id": KEY_ID,
                           "access_key_secret": secret, "sign_name": "阿里云短信测试", "template_code": "SMS_100",
                           "endpoint": endpoint, **settings})


def test_aliyun_signature_matches_the_documented_example() -> None:
    # The worked example of Alibaba Cloud's SendSms signature documentation.
    params = {"AccessKeyId": "testId", "Action": "SendSms", "Format": "XML", "OutId": "123",
              "PhoneNumbers": "15300000001", "RegionId": "cn-hangzhou", "SignName": "阿里云短信测试专用",
              "SignatureMethod": "HMAC-SHA1", "SignatureNonce": "45e25e9b-0a6f-4070-8c85-2956eda1b466",
              "SignatureVersion": "1.0", "TemplateCode": "SMS_71390007", "TemplateParam": '{"customer":"test"}',
              "Timestamp": "2017-07-12T02:42:19Z", "Version": "2017-05-25"}
    assert signature(params, "testSecret") == "zJDF+Lrzhj/ThnlvIToysFRq6t4="


def test_sms_is_sent_with_a_verified_signature(sms_server: AliyunSmsServer) -> None:
    body = "Code 123456: a b*c~d+e&f=g/h? 😀 验证码"
    delivery, _ = send(aliyun(sms_server.url()), message(to=PHONE, body=body))
    assert delivery.sent and delivery.message_id == "biz-req-1"
    [request] = sms_server.requests
    assert request.verdict == "OK"  # the server recomputed the signature and it matched
    params = request.params
    assert (params["PhoneNumbers"], params["SignName"], params["TemplateCode"]) == (PHONE, "阿里云短信测试", "SMS_100")
    assert json.loads(params["TemplateParam"]) == {"content": body}
    assert params["RegionId"] == "cn-hangzhou"


def test_sms_template_code_and_params_from_the_message(sms_server: AliyunSmsServer) -> None:
    msg = message(to="13800138000", template_code="SMS_200", template_param={"code": "654321", "ttl": "5 min"})
    delivery, _ = send(aliyun(sms_server.url(), region_id="cn-shanghai"), msg)
    assert delivery.sent
    params = sms_server.requests[0].params
    assert params["TemplateCode"] == "SMS_200" and params["RegionId"] == "cn-shanghai"
    assert json.loads(params["TemplateParam"]) == {"code": "654321", "ttl": "5 min"}


def test_sms_with_a_wrong_secret_is_refused_by_the_server(sms_server: AliyunSmsServer) -> None:
    delivery, _ = send(aliyun(sms_server.url(), secret="not-the-secret"), message(to=PHONE))
    failed(delivery, "permanent_rejection", started=True)
    assert sms_server.requests[0].verdict == "SignatureDoesNotMatch"
    assert "not-the-secret" not in (delivery.error or "")


@pytest.mark.parametrize(("code", "status", "failure_class"), [
    ("isv.BUSINESS_LIMIT_CONTROL", 200, "transient_failure"),
    ("Throttling.User", 400, "transient_failure"),
    ("isp.SYSTEM_ERROR", 500, "transient_failure"),
    ("isv.MOBILE_NUMBER_ILLEGAL", 200, "permanent_rejection"),
    ("isv.SMS_TEMPLATE_ILLEGAL", 200, "permanent_rejection"),
])
def test_sms_result_codes_are_classified(sms_server: AliyunSmsServer, code: str, status: int,
                                         failure_class: str) -> None:
    sms_server.refuse(code, status)
    delivery, _ = send(aliyun(sms_server.url()), message(to=PHONE))
    failed(delivery, failure_class, started=True)
    assert code in (delivery.error or "") and PHONE not in (delivery.error or "")


def test_sms_refused_connection_is_provider_unavailable(closed_port: int) -> None:
    failed(send(aliyun(f"http://127.0.0.1:{closed_port}/"), message(to=PHONE))[0], "provider_unavailable", False)


def test_sms_without_a_template_code_is_invalid_and_not_sent(sms_server: AliyunSmsServer) -> None:
    provider = build_provider({"name": "sms", "type": "aliyun-sms", "access_key_id": KEY_ID,
                               "access_key_secret": KEY_SECRET, "sign_name": "S", "endpoint": sms_server.url()})
    failed(send(provider, message(to=PHONE))[0], "invalid_message", started=False)
    failed(send(provider, message(to=PHONE, template_code="SMS_1", template_param=["x"]))[0], "invalid_message",
           started=False)
    assert not sms_server.requests


# --- console ----------------------------------------------------------------------------------


def test_console_logs_metadata_only(caplog: pytest.LogCaptureFixture) -> None:
    provider = build_provider({"name": "dev", "type": "console"}, environ={})
    caplog.set_level(logging.DEBUG)
    for to in (RECIPIENT, PHONE):
        delivery = provider.send(message(to=to, subject="Login code 123456", body="Your code is 123456 (tok-abc)"),
                                 "queue-1", 1_000)
        assert delivery.sent and delivery.message_id
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "a***@example.org" in text and "+86*********21" in text
    for secret in ("123456", "Your code", "tok-abc", "Login code", RECIPIENT, PHONE):
        assert secret not in text


@pytest.mark.parametrize(("environ", "allowed"), [
    ({"HAI_ENV": "production"}, False), ({"HAI_ENV": " Production "}, False),
    ({"HAI_ENV": "production", "HAI_E2E": "0"}, False), ({"HAI_ENV": "production", "HAI_E2E": "1"}, True),
    ({"HAI_ENV": "development"}, True), ({}, True),
])
def test_console_is_refused_in_production(environ: dict[str, str], allowed: bool) -> None:
    config = {"name": "dev", "type": "console"}
    if allowed:
        assert build_provider(config, environ).type == "console"
        return
    with pytest.raises(ReachConfigError) as caught:
        build_provider(config, environ)
    assert caught.value.field == "providers.dev.type" and caught.value.code == "hai:reach:012"


# --- configuration ----------------------------------------------------------------------------

SMTP = {"name": "mail", "type": "smtp", "host": "smtp.example.com", "from": SENDER}
API = {"name": "hook", "type": "api", "url": "https://hooks.example/notify"}
SMS = {"name": "sms", "type": "aliyun-sms", "access_key_id": KEY_ID, "access_key_secret": KEY_SECRET,
       "sign_name": "Shop"}
CONSOLE = {"name": "dev", "type": "console"}
SECRET_VALUE = "Sup3r-Secret-Value"

INVALID: list[tuple[dict[str, Any], dict[str, Any], str]] = [  # (base, changes, field in the error)
    (SMTP, {"bogus": 1}, "providers.mail.bogus"),
    (SMTP, {"type": None}, "providers.mail.type"), (SMTP, {"type": 5}, "providers.mail.type"),
    (SMTP, {"host": None}, "providers.mail.host"), (SMTP, {"host": "smtp example"}, "providers.mail.host"),
    (SMTP, {"port": 0}, "providers.mail.port"), (SMTP, {"port": 65536}, "providers.mail.port"),
    (SMTP, {"port": "25"}, "providers.mail.port"), (SMTP, {"port": True}, "providers.mail.port"),
    (SMTP, {"tls": "ssl"}, "providers.mail.tls"),
    (SMTP, {"username": "robot"}, "providers.mail.password"),
    (SMTP, {"password": SECRET_VALUE}, "providers.mail.username"),
    (SMTP, {"username": "robot", "password": ""}, "providers.mail.password"),
    (SMTP, {"from": None}, "providers.mail.from"), (SMTP, {"from": f"Robot <{SENDER}>"}, "providers.mail.from"),
    (SMTP, {"from": "robot@localhost"}, "providers.mail.from"),
    (SMTP, {"timeout_ms": 999}, "providers.mail.timeout_ms"),
    (SMTP, {"timeout_ms": 86_400_001}, "providers.mail.timeout_ms"),
    (SMTP, {"timeout_ms": 1500.0}, "providers.mail.timeout_ms"),
    (API, {"url": None}, "providers.hook.url"), (API, {"url": "ftp://hooks.example/"}, "providers.hook.url"),
    (API, {"url": "https://"}, "providers.hook.url"), (API, {"url": "http://h:99999/"}, "providers.hook.url"),
    (API, {"url": "https://hooks.example/a b"}, "providers.hook.url"),
    (API, {"headers": ["X-A"]}, "providers.hook.headers"),
    (API, {"headers": {"Bad Header": "x"}}, "providers.hook.headers.Bad Header"),
    (API, {"headers": {"X-Token": SECRET_VALUE + "\r\nX-Evil: 1"}}, "providers.hook.headers.X-Token"),
    (API, {"headers": {"X-A": 1}}, "providers.hook.headers.X-A"),
    (API, {"headers": {"X-A": "1", "x-a": "2"}}, "providers.hook.headers.x-a"),
    (API, {"headers": {"Idempotency-Key": "k"}}, "providers.hook.headers.Idempotency-Key"),
    (API, {"idempotent": "yes"}, "providers.hook.idempotent"),
    (API, {"timeout_ms": 0}, "providers.hook.timeout_ms"), (API, {"method": "GET"}, "providers.hook.method"),
    (SMS, {"access_key_id": None}, "providers.sms.access_key_id"),
    (SMS, {"access_key_secret": ""}, "providers.sms.access_key_secret"),
    (SMS, {"sign_name": None}, "providers.sms.sign_name"), (SMS, {"template_code": 5}, "providers.sms.template_code"),
    (SMS, {"region_id": ""}, "providers.sms.region_id"), (SMS, {"endpoint": "ftp://x/"}, "providers.sms.endpoint"),
    (SMS, {"timeout_ms": 100}, "providers.sms.timeout_ms"), (SMS, {"sign_name": "a\nb"}, "providers.sms.sign_name"),
    (CONSOLE, {"level": "info"}, "providers.dev.level"),
    (CONSOLE, {"name": ""}, "providers[0].name"), (CONSOLE, {"name": None}, "providers[0].name"),
    (CONSOLE, {"name": "x" * 65}, "providers[0].name"), (CONSOLE, {"name": " dev"}, "providers[0].name"),
    (CONSOLE, {"name": "a\nb"}, "providers[0].name"), (CONSOLE, {"name": 7}, "providers[0].name"),
]


@pytest.mark.parametrize(("base", "changes", "field"), INVALID, ids=[f for _, _, f in INVALID])
def test_every_invalid_setting_is_refused_naming_its_field(base: dict[str, Any], changes: dict[str, Any],
                                                           field: str) -> None:
    config = {key: value for key, value in {**base, **changes}.items() if value is not None}
    with pytest.raises(ReachConfigError) as caught:
        build_providers([config], environ={})
    assert caught.value.field == field and str(caught.value).startswith(f"hai:reach:012 {field}: ")
    assert SECRET_VALUE not in str(caught.value)


def test_unknown_type_duplicates_and_shapes_are_refused() -> None:
    with pytest.raises(UnsupportedTypeError) as unsupported:
        build_provider({"name": "fax", "type": "fax"})
    assert unsupported.value.code == "hai:reach:011" and "providers.fax.type" in str(unsupported.value)
    with pytest.raises(ReachConfigError) as duplicate:
        build_providers([CONSOLE, API, {**SMTP, "name": "dev"}], environ={})
    assert duplicate.value.field == "providers[2].name"
    for value, field in (({"name": "x"}, "providers"), ("smtp", "providers"), ([["dev"]], "providers[0]")):
        with pytest.raises(ReachConfigError) as caught:
            build_providers(value, environ={})  # type: ignore[arg-type]
        assert caught.value.field == field


def test_valid_configurations_get_their_defaults() -> None:
    providers = build_providers([SMTP, {**SMTP, "name": "smtps", "tls": "implicit"},
                                 {**SMTP, "name": "plain", "tls": "none"}, API, SMS, CONSOLE], environ={})
    assert [providers[name].snapshot()["port"] for name in ("mail", "smtps", "plain")] == [587, 465, 25]
    assert providers["hook"].idempotent is False and providers["hook"].snapshot()["timeout_ms"] == 30_000
    assert providers["sms"].snapshot()["endpoint"] == "https://dysmsapi.aliyuncs.com/"
    assert providers["sms"].snapshot()["region_id"] == "cn-hangzhou"
    assert {name: provider.type for name, provider in providers.items()} == {
        "mail": "smtp", "smtps": "smtp", "plain": "smtp", "hook": "api", "sms": "aliyun-sms", "dev": "console"}


RECIPIENTS: list[tuple[dict[str, Any], list[str], list[str]]] = [  # (config, valid, invalid)
    (SMTP, ["a.b+c@example.com", "x_y@sub.example.co"],
     ["", "bob", "Bob <bob@example.com>", "bob@example.com\r\nBcc: eve@example.com", "bob@localhost",
      "bö@example.com", "a@b.com, c@d.com", "a..b@example.com", "x" * 65 + "@example.com"]),
    (API, ["user-42", "张三", "https://chat.example/hook?x=1", "a b"],
     ["", "x" * 513, " padded", "a\nb", "https://", "http://bad host/", "\u202eevil"]),
    (SMS, [PHONE, "13800138000", "123456"], ["", "+86 138 0013 8000", "138-0013-8000", "abc", "12345",
                                              "+" + "1" * 16, PHONE + "\n"]),
    (CONSOLE, [RECIPIENT, PHONE, "anything at all"], ["", "a\x00b", "x" * 513]),
]


@pytest.mark.parametrize(("config", "valid", "invalid"), RECIPIENTS, ids=[c["type"] for c, _, _ in RECIPIENTS])
def test_recipients_are_validated_per_type(config: dict[str, Any], valid: list[str], invalid: list[str]) -> None:
    provider = build_provider(config, environ={})
    for to in valid:
        provider.validate_recipient(to)
    for to in invalid:
        with pytest.raises(InvalidRecipientError) as caught:
            provider.validate_recipient(to)
        assert caught.value.code == "hai:reach:004"
        assert not to or to not in str(caught.value)


def test_snapshots_mask_every_secret() -> None:
    providers = build_providers([
        {**SMTP, "username": "robot", "password": SECRET_VALUE},
        {**API, "url": f"https://user:{SECRET_VALUE}@hooks.example/n?access_token={SECRET_VALUE}&team=ops",
         "headers": {"Authorization": f"Bearer {SECRET_VALUE}", "X-Api-Key": SECRET_VALUE, "X-Team": "ops"}},
        {**SMS, "access_key_secret": SECRET_VALUE},
    ], environ={})
    snapshots = {name: provider.snapshot() for name, provider in providers.items()}
    assert SECRET_VALUE not in json.dumps(snapshots, ensure_ascii=False)
    assert SECRET_VALUE not in repr(providers)
    assert snapshots["mail"]["password"] == "***" and snapshots["mail"]["username"] == "robot"
    assert snapshots["hook"]["headers"] == {"Authorization": "***", "X-Api-Key": "***", "X-Team": "ops"}
    assert snapshots["hook"]["url"] == "https://user:***@hooks.example/n?access_token=***&team=ops"
    assert snapshots["sms"]["access_key_secret"] == "***"
    assert build_provider(SMTP, environ={}).snapshot()["password"] is None
