"""The api executor against a real HTTP server on 127.0.0.1: headers, outcomes, one deadline,
byte limit, cancellation, validation (nothing sent for an invalid config) and secret masking.

Every execute is checked for leaked threads: the executor's worker must be gone within a second.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler_core.errors import ConfigError
from scheduler_core.executors.base import CancelSignal, ExecutionContext, ExecutionRequest, Outcome, OutcomeStatus
from scheduler_core.executors.http import HttpExecutor
from scheduler_core.masking import mask_headers, masked_handler
from scheduler_core.model import TaskDefinition
from tests.helpers.http_server import THREAD_NAME, RecordingServer

TASK_ID = "billing/run#1"
AMBIGUOUS: dict[bool, OutcomeStatus] = {False: "unknown", True: "failed"}  # by the task's idempotency


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with RecordingServer() as recording:
        yield recording


def _threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name != THREAD_NAME]


def _assert_no_leak(before: int) -> None:
    deadline = time.monotonic() + 1.0
    while len(_threads()) > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(_threads()) <= before, f"threads left behind: {[t.name for t in _threads()]}"


def api(url: str, **settings: Any) -> dict[str, Any]:
    return {"kind": "api", "url": url, **settings}


def make_request(handler: dict[str, Any], idempotent: bool = False, signal: CancelSignal | None = None
                 ) -> ExecutionRequest:
    task = TaskDefinition(id=TASK_ID, name="n", cron="* * * * *", idempotent=idempotent, handler=handler)
    context = ExecutionContext(task_id=TASK_ID, occurrence_id="occ-1", execution_token="tok", sequence=2,
                               attempt=3, trigger="manual", source=None, scheduled_minute=None, params={})
    return ExecutionRequest(task=task, handler=handler, context=context, signal=signal or CancelSignal(),
                            hooks=None)


def run(handler: dict[str, Any], idempotent: bool = False, signal: CancelSignal | None = None
        ) -> tuple[Outcome, float]:
    """Execute once; return the outcome and the seconds it took, after checking no thread leaked."""
    before = len(_threads())
    started = time.monotonic()
    outcome = HttpExecutor().execute(make_request(handler, idempotent, signal))
    elapsed = time.monotonic() - started
    _assert_no_leak(before)
    return outcome, elapsed


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


# --- what the receiver sees --------------------------------------------------------


def test_receiver_sees_scheduler_headers_over_user_headers_and_the_json_body(server: RecordingServer) -> None:
    body = {"amount": 12, "items": ["a", "b"], "note": None}
    user_headers = {"idempotency-key": "mine", "X-SCHEDULER-ATTEMPT": "99", "x-scheduler-task": "t",
                    "X-Custom": "kept", "Authorization": "Bearer s3cret"}
    outcome, _ = run(api(server.url("/echo"), method="post", headers=user_headers, body=body))

    assert outcome == Outcome("success", body)
    [seen] = server.requests
    assert (seen.method, seen.path) == ("POST", "/echo")
    assert seen.json() == body
    assert seen.header("content-type") == "application/json"
    expected = {"Idempotency-Key": "occ-1", "X-Scheduler-Sequence": "2", "X-Scheduler-Attempt": "3",
                "X-Scheduler-Task": "billing%2Frun%231"}
    for name, value in expected.items():
        assert seen.header(name) == value
        assert seen.count(name) == 1, f"{name} sent {seen.count(name)} times"
    assert seen.header("x-custom") == "kept"
    assert seen.header("authorization") == "Bearer s3cret"


@pytest.mark.parametrize("method", ["get", "Post", "PUT", "delete", "patch"])
def test_method_is_sent_upper_case(server: RecordingServer, method: str) -> None:
    outcome, _ = run(api(server.url("/ok"), method=method))
    assert outcome.status == "success"
    assert [seen.method for seen in server.requests] == [method.upper()]
    assert server.requests[0].body == b""


# --- answers ------------------------------------------------------------------------


def test_json_answer_is_the_decoded_result(server: RecordingServer) -> None:
    assert run(api(server.url("/ok")))[0] == Outcome("success", {"ok": True})


def test_text_answer_is_the_text(server: RecordingServer) -> None:
    assert run(api(server.url("/text")))[0] == Outcome("success", "hello")


@pytest.mark.parametrize("idempotent", [False, True])
@pytest.mark.parametrize("code", [200, 201, 299, 302, 404, 409, 500, 503])
def test_status_classes(server: RecordingServer, code: int, idempotent: bool) -> None:
    outcome, _ = run(api(server.url(f"/status/{code}")), idempotent=idempotent)
    if 200 <= code < 300:
        assert outcome == Outcome("success", {"status": code})
    else:
        assert outcome.status == AMBIGUOUS[idempotent]
        assert outcome.error is not None and outcome.error.startswith(f"HTTP {code}")
    assert len(server.requests) == 1  # a 3xx is not followed


def test_large_result_is_kept_as_a_preview(server: RecordingServer) -> None:
    outcome, _ = run(api(server.url("/huge/102400")))
    assert outcome == Outcome("success", {"truncated": True, "preview": "x" * 65536, "bytes": 102400})


# --- nothing sent: definite failures -------------------------------------------------


@pytest.mark.parametrize("idempotent", [False, True])
def test_connection_refused_is_a_definite_failure(idempotent: bool) -> None:
    url = f"http://user:hunter2pass@127.0.0.1:{free_port()}/ok"
    outcome, elapsed = run(api(url, headers={"X-Api-Key": "k3y-value"}), idempotent=idempotent)
    assert outcome.status == "failed"
    assert outcome.error is not None and outcome.error.startswith("request not sent")
    assert "refused" in outcome.error.lower()
    assert "hunter2pass" not in outcome.error and "k3y-value" not in outcome.error
    assert elapsed < 5  # refused at once, not after a timeout


@pytest.mark.parametrize("idempotent", [False, True])
def test_dns_failure_is_a_definite_failure(idempotent: bool) -> None:
    outcome, elapsed = run(api("http://no-such-host.invalid/run", timeout=3000), idempotent=idempotent)
    assert outcome.status == "failed"
    assert outcome.error is not None and outcome.error.startswith(("request not sent", "timeout after 3000 ms;"))
    assert elapsed < 8  # within the 3 s deadline (bounds are loose: the machine may be loaded)


@pytest.mark.parametrize("idempotent", [False, True])
def test_tls_handshake_failure_is_a_definite_failure(server: RecordingServer, idempotent: bool) -> None:
    outcome, _ = run(api(f"https://127.0.0.1:{server.port}/ok"), idempotent=idempotent)  # a plain-HTTP server
    assert outcome.status == "failed"
    assert outcome.error is not None and outcome.error.startswith("request not sent: SSL")
    assert server.requests == []


def test_host_that_cannot_be_looked_up_is_a_definite_failure() -> None:
    outcome, _ = run(api("http://a..b/run"))  # valid to urlsplit, refused by the IDNA codec at connect
    assert outcome.status == "failed"
    assert outcome.error is not None and outcome.error.startswith("request not sent")


# --- one deadline -------------------------------------------------------------------


@pytest.mark.parametrize("idempotent", [False, True])
def test_deadline_covers_a_trickling_body(server: RecordingServer, idempotent: bool) -> None:
    outcome, elapsed = run(api(server.url("/trickle/100"), timeout=2000), idempotent=idempotent)
    assert outcome == Outcome(AMBIGUOUS[idempotent], None, "timeout after 2000 ms")
    assert 1.9 <= elapsed < 6  # the body trickles for 100 s
    assert (server.wait_for_outcome() or "").startswith("client gone")  # the connection was closed


@pytest.mark.parametrize("idempotent", [False, True])
def test_deadline_covers_waiting_for_the_answer(server: RecordingServer, idempotent: bool) -> None:
    outcome, elapsed = run(api(server.url("/slow/10"), timeout=1000), idempotent=idempotent)
    assert outcome == Outcome(AMBIGUOUS[idempotent], None, "timeout after 1000 ms")
    assert elapsed < 6  # the server answers after 10 s
    assert (server.wait_for_outcome() or "").startswith("client gone")


@pytest.fixture
def unanswered_port() -> Iterator[int]:
    """A port whose accept queue is full, so that a new connect hangs (Linux drops the SYN)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers: list[socket.socket] = []
    try:
        for _ in range(3):
            filler = socket.socket()
            filler.settimeout(0.2)
            fillers.append(filler)
            try:
                filler.connect(("127.0.0.1", port))
            except OSError:
                break
        else:
            pytest.skip("connects to a full accept queue do not hang on this platform")
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


@pytest.mark.parametrize("idempotent", [False, True])
def test_deadline_covers_connect_and_nothing_was_sent(unanswered_port: int, idempotent: bool) -> None:
    url = f"http://127.0.0.1:{unanswered_port}/ok"
    outcome, elapsed = run(api(url, timeout=1000), idempotent=idempotent)
    assert outcome == Outcome("failed", None, "timeout after 1000 ms; the request was not sent")
    assert elapsed < 6  # the port never answers


# --- byte limit ---------------------------------------------------------------------


@pytest.mark.parametrize("idempotent", [False, True])
def test_response_over_the_limit(server: RecordingServer, idempotent: bool) -> None:
    outcome, _ = run(api(server.url("/huge/5000"), max_response_bytes=1000), idempotent=idempotent)
    assert outcome == Outcome(AMBIGUOUS[idempotent], None, "response exceeded max_response_bytes (1000)")


def test_reading_stops_at_the_limit(server: RecordingServer) -> None:
    outcome, elapsed = run(api(server.url(f"/huge/{256 * 1024 * 1024}"), max_response_bytes=1000))
    assert outcome.status == "unknown"
    assert elapsed < 6  # 256 MiB were not read
    assert (server.wait_for_outcome() or "").startswith("client gone")


def test_body_of_exactly_the_limit_is_accepted(server: RecordingServer) -> None:
    outcome, _ = run(api(server.url("/huge/1000"), max_response_bytes=1000))
    assert outcome == Outcome("success", "x" * 1000)


# --- cancellation and dropped connections ----------------------------------------------


@pytest.mark.parametrize("idempotent", [False, True])
def test_cancellation_after_sending_closes_the_connection(server: RecordingServer, idempotent: bool) -> None:
    signal = CancelSignal()
    timer = threading.Timer(0.5, signal.cancel, args=("closing",))
    timer.start()
    try:
        outcome, elapsed = run(api(server.url("/slow/10")), idempotent=idempotent, signal=signal)
    finally:
        timer.cancel()
        timer.join()
    assert outcome == Outcome(AMBIGUOUS[idempotent], None, "cancelled: closing")
    assert 0.45 <= elapsed < 6  # cancelled at 0.5 s; the server answers after 10 s
    assert (server.wait_for_outcome() or "").startswith("client gone")


def test_cancellation_while_connecting_is_interrupted(unanswered_port: int) -> None:
    signal = CancelSignal()
    timer = threading.Timer(0.5, signal.cancel, args=("closing",))
    timer.start()
    try:
        outcome, elapsed = run(api(f"http://127.0.0.1:{unanswered_port}/ok"), signal=signal)
    finally:
        timer.cancel()
        timer.join()
    assert outcome == Outcome("interrupted", None, "cancelled: closing")
    assert elapsed < 6  # the port never answers


def test_cancelled_before_start_sends_nothing(server: RecordingServer) -> None:
    signal = CancelSignal()
    signal.cancel("lease_lost")
    outcome, _ = run(api(server.url("/ok")), signal=signal)
    assert outcome == Outcome("interrupted", None, "cancelled: lease_lost")
    assert server.requests == []


@pytest.mark.parametrize("idempotent", [False, True])
def test_dropped_connection_is_ambiguous(server: RecordingServer, idempotent: bool) -> None:
    outcome, _ = run(api(server.url("/drop"), method="POST", body={"charge": 1}), idempotent=idempotent)
    assert outcome.status == AMBIGUOUS[idempotent]
    assert outcome.error is not None and outcome.error.startswith("connection lost")
    assert len(server.requests) == 1


# --- validation -----------------------------------------------------------------------

INVALID: list[tuple[dict[str, Any], str]] = [
    ({"method": "HEAD"}, "handler.method"),
    ({"method": 5}, "handler.method"),
    ({"url": "example.com/run"}, "handler.url"),
    ({"url": "ftp://example.com/run"}, "handler.url"),
    ({"url": "http:///run"}, "handler.url"),
    ({"url": "http://example.com:99999/"}, "handler.url"),
    ({"url": "http://example.com/a b"}, "handler.url"),
    ({"url": None}, "handler.url"),
    ({"timeout": 0}, "handler.timeout"),
    ({"timeout": 86_400_001}, "handler.timeout"),
    ({"timeout": True}, "handler.timeout"),
    ({"timeout": 1.5}, "handler.timeout"),
    ({"max_response_bytes": 0}, "handler.max_response_bytes"),
    ({"max_response_bytes": -1}, "handler.max_response_bytes"),
    ({"max_response_bytes": 2**53}, "handler.max_response_bytes"),
    ({"max_response_bytes": 1.5}, "handler.max_response_bytes"),
    ({"max_response_bytes": True}, "handler.max_response_bytes"),
    ({"max_response_bytes": "10"}, "handler.max_response_bytes"),
    ({"headers": ["X-A: 1"]}, "handler.headers"),
    ({"headers": "X-A: 1"}, "handler.headers"),
    ({"headers": {"X-A": "one\ntwo"}}, "handler.headers.X-A"),
    ({"headers": {"X-A": "one\rtwo"}}, "handler.headers.X-A"),
    ({"headers": {"X-A": 1}}, "handler.headers.X-A"),
    ({"headers": {"X-A": " leading space"}}, "handler.headers.X-A"),
    ({"headers": {"X-A": "euro \u20ac"}}, "handler.headers.X-A"),
    ({"headers": {"X A": "1"}}, "handler.headers.X A"),
    ({"headers": {"X-A\n": "1"}}, "handler.headers.X-A\n"),
    ({"headers": {"X-A": "1", "x-a": "2"}}, "handler.headers.x-a"),
    ({"body": {"ratio": float("nan")}}, "handler.body"),
    ({"body": {1, 2}}, "handler.body"),
    ({"retries": 3}, "handler.retries"),
    ({"kind": "hook"}, "handler.kind"),
]


@pytest.mark.parametrize(("settings", "field"), INVALID, ids=[f"{field}-{i}" for i, (_, field) in enumerate(INVALID)])
def test_invalid_config_is_refused_and_nothing_is_sent(server: RecordingServer, settings: dict[str, Any],
                                                      field: str) -> None:
    handler = {**api(server.url("/ok")), **settings}
    with pytest.raises(ConfigError) as raised:
        HttpExecutor().validate(handler)
    assert raised.value.field == field

    outcome, _ = run(handler)
    assert outcome.status == "failed"
    assert outcome.error is not None and "CONFIG_ERROR" in outcome.error and field in outcome.error
    assert server.requests == []


def test_header_values_never_appear_in_errors(server: RecordingServer) -> None:
    handler = api(server.url("/ok"), headers={"Authorization": "Bearer s3cret\nX-Evil: 1"})
    outcome, _ = run(handler)
    assert outcome.status == "failed" and outcome.error is not None
    assert "handler.headers.Authorization" in outcome.error and "s3cret" not in outcome.error
    assert server.requests == []


def test_validate_normalises_and_fills_defaults() -> None:
    executor = HttpExecutor()
    normalised = executor.validate({"kind": "api", "url": "https://example.com/run", "method": "post",
                                    "body": {"a": 1}})
    assert normalised == {"kind": "api", "url": "https://example.com/run", "method": "POST", "headers": {},
                          "body": {"a": 1}, "timeout": 30000, "max_response_bytes": 1048576}
    assert executor.validate(normalised) == normalised
    largest = executor.validate(api("http://example.com", timeout=86_400_000, max_response_bytes=2**53 - 1))
    assert (largest["method"], largest["timeout"], largest["max_response_bytes"]) == ("GET", 86_400_000, 2**53 - 1)
    assert "body" not in executor.validate(api("http://example.com", body=None))


# --- masking ----------------------------------------------------------------------------


def test_mask_headers_masks_credentials_and_nothing_else() -> None:
    secret = {"Authorization": "a", "proxy-authorization": "b", "Cookie": "c", "Set-Cookie": "d",
              "X-Api-Key": "e", "X-Auth-Token": "f", "Client-Secret": "g", "X-Password": "h", "X-Session-Id": "i",
              "Idempotency-Key": "j", "X-OAuth": "k"}
    plain = {"Content-Type": "application/json", "Accept": "*/*", "X-Request-Id": "r", "User-Agent": "u",
             "X-Scheduler-Task": "t"}
    assert mask_headers({**secret, **plain}) == {**{name: "***" for name in secret}, **plain}


def test_masked_handler_masks_headers_and_url_password_only() -> None:
    handler: dict[str, Any] = {"kind": "api", "url": "https://svc:pa%3Ass@billing.example:8443/run?x=1",
                               "method": "POST", "headers": {"Authorization": "Bearer s", "X-Tenant": "acme"},
                               "body": {"a": [1]}, "timeout": 5}
    masked = masked_handler(handler)
    assert masked == {"kind": "api", "url": "https://svc:***@billing.example:8443/run?x=1", "method": "POST",
                      "headers": {"Authorization": "***", "X-Tenant": "acme"}, "body": {"a": [1]}, "timeout": 5}
    assert handler["headers"]["Authorization"] == "Bearer s"  # a copy: the original is untouched
    masked["body"]["a"].append(2)
    assert handler["body"] == {"a": [1]}
    for url in ("https://billing.example/run", "https://svc@billing.example/run"):
        assert masked_handler(api(url))["url"] == url
