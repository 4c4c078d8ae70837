"""``type: smtp``: one SMTP session (smtplib) per delivery, under one deadline.

A failure before DATA is not started (the server has at most seen the envelope); from DATA on it is
started. Config, TLS modes and the full classification: docs/executors-and-providers.md.
"""

from __future__ import annotations

import contextlib
import smtplib
import ssl
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from email.utils import formatdate, make_msgid
from typing import Any, Literal

from scheduler_core.masking import MASK
from scheduler_core.reach.base import Delivery, RenderedMessage
from scheduler_core.reach.providers._config import Settings, is_email, refuse_recipient
from scheduler_core.reach.providers._delivery import (
    ambiguous,
    budget_ms,
    delivered,
    no_time_left,
    not_started,
    safe_error,
)
from scheduler_core.transport import Watchdog, shutdown_socket

SETTINGS = ("host", "port", "tls", "username", "password", "from", "timeout_ms")
TLS_MODES = ("starttls", "implicit", "none")
DEFAULT_PORTS = {"starttls": 587, "implicit": 465, "none": 25}
Phase = Literal["connect", "auth", "envelope", "data"]


def _reply_class(code: int) -> Literal["transient_failure", "permanent_rejection"]:
    return "transient_failure" if 400 <= code < 500 else "permanent_rejection"


def _address_literal(client: smtplib.SMTP) -> str:
    """Our EHLO name: the address literal of our end (RFC 5321 4.1.4); getfqdn() can block on DNS."""
    assert client.sock is not None
    address = str(client.sock.getsockname()[0])
    return f"[IPv6:{address}]" if ":" in address else f"[{address}]"


@dataclass(eq=False)
class SmtpProvider:
    """Sends each message in its own SMTP session (docs/executors-and-providers.md)."""

    name: str
    host: str
    sender: str  # the "from" setting
    port: int = 587
    tls: str = "starttls"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout_ms: int = 30_000
    type: str = field(default="smtp", init=False)
    idempotent: bool = field(default=False, init=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> SmtpProvider:
        tls = settings.choice("tls", TLS_MODES, "starttls")
        username = settings.text("username", max_length=256)
        password = settings.text("password", max_length=1024)
        if (username is None) != (password is None):
            settings.fail("password" if password is None else "username", "username and password go together")
        return cls(name=settings.name, host=settings.host("host"), sender=settings.email("from"),
                   port=settings.integer("port", DEFAULT_PORTS[tls], 1, 65535), tls=tls,
                   username=username, password=password, timeout_ms=settings.timeout_ms())

    def validate_recipient(self, to: str) -> None:
        if not isinstance(to, str) or not is_email(to):
            refuse_recipient(self.name, "one plain email address (no display name)")

    def compose(self, message: RenderedMessage) -> EmailMessage:
        """The email; ValueError (or UnicodeError) for a subject or body that cannot be one."""
        email = EmailMessage()
        email["From"] = self.sender
        email["To"] = message.to
        if message.subject:
            email["Subject"] = message.subject  # CR/LF refused by the header machinery: no header injection
        email["Date"] = formatdate(usegmt=True)
        email["Message-ID"] = make_msgid(domain=self.sender.rpartition("@")[2])
        # quoted-printable keeps the wire 7-bit: no reliance on the server offering 8BITMIME
        email.set_content(message.body, charset="utf-8", cte="quoted-printable")
        return email

    def send(self, message: RenderedMessage, idempotency_key: str | None, timeout_ms: int) -> Delivery:
        if not isinstance(message.to, str) or not is_email(message.to):
            return not_started("invalid_message", "invalid recipient")
        try:
            email = self.compose(message)
            payload = email.as_bytes(policy=SMTP_POLICY)
        except (ValueError, TypeError, UnicodeError) as exc:
            return not_started("invalid_message", f"cannot compose the email ({type(exc).__name__})")
        budget = budget_ms(self.timeout_ms, timeout_ms)
        if budget is None:
            return no_time_left()
        return _Session(self, budget, message.to).deliver(payload, str(email["Message-ID"]))

    def snapshot(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "host": self.host, "port": self.port, "tls": self.tls,
                "username": self.username, "password": MASK if self.password else None, "from": self.sender,
                "timeout_ms": self.timeout_ms}


class _Session:
    """One SMTP conversation; ``phase`` says how far it got, which is what classifies a failure."""

    def __init__(self, provider: SmtpProvider, budget: int, to: str) -> None:
        self.provider = provider
        self.budget = budget
        self.to = to
        self.phase: Phase = "connect"
        seconds = budget / 1000  # smtplib's per-operation timeout; the watchdog bounds the whole session
        # local_hostname given so smtplib does not call getfqdn(); replaced by our address once connected.
        self.client = (smtplib.SMTP_SSL(local_hostname="localhost", timeout=seconds,
                                        context=ssl.create_default_context())
                       if provider.tls == "implicit" else smtplib.SMTP(local_hostname="localhost", timeout=seconds))
        # smtplib verifies the certificate against ``_host``, which only a constructor that connects sets;
        # we connect later, under the watchdog.
        self.client._host = provider.host  # type: ignore[attr-defined]

    def deliver(self, payload: bytes, message_id: str) -> Delivery:
        try:
            with Watchdog(self.budget, lambda _cause: shutdown_socket(self.client.sock)) as dog:
                try:
                    return self._converse(payload, message_id)
                except smtplib.SMTPResponseException as exc:
                    return self._answered(exc.smtp_code, exc)
                except (OSError, smtplib.SMTPException) as exc:  # includes timeouts and lost connections
                    return self._failed(exc, dog.fired)
        finally:
            self.client.close()  # after the watchdog finished: it never shuts down a socket being closed

    def _converse(self, payload: bytes, message_id: str) -> Delivery:
        client, provider = self.client, self.provider
        client.connect(provider.host, provider.port)
        client.local_hostname = _address_literal(client)
        client.ehlo_or_helo_if_needed()
        if provider.tls == "starttls":
            client.starttls(context=ssl.create_default_context())
            client.ehlo()
        self.phase = "auth"
        if provider.username is not None and provider.password is not None:
            client.login(provider.username, provider.password)
        self.phase = "envelope"
        refused = self._envelope("MAIL FROM", client.mail(provider.sender)[0]) \
            or self._envelope("RCPT TO", client.rcpt(self.to)[0])
        if refused is not None:
            return refused
        self.phase = "data"
        code, _text = client.data(payload)  # raises SMTPDataError when DATA itself is refused
        if code != 250:
            return ambiguous(_reply_class(code), f"SMTP {code} after the message content")
        with contextlib.suppress(OSError):  # accepted: a failing QUIT changes nothing
            client.quit()
        return delivered(message_id)

    def _envelope(self, command: str, code: int) -> Delivery | None:
        """None when the server took this envelope step; a refusal ends the session before DATA."""
        if code in (250, 251):
            return None
        with contextlib.suppress(OSError):
            self.client.quit()
        return not_started(_reply_class(code), f"SMTP {code} at {command}; not sent")

    def _answered(self, code: int, exc: smtplib.SMTPResponseException) -> Delivery:
        # The reply code only: reply texts often repeat the address.
        if self.phase == "connect":  # greeting or STARTTLS refused
            return not_started("provider_unavailable", f"SMTP {code} while connecting; not sent")
        if self.phase == "data":
            return ambiguous(_reply_class(code), f"SMTP {code} at DATA")
        what = "authentication failed" if isinstance(exc, smtplib.SMTPAuthenticationError) else "refused"
        return not_started(_reply_class(code), f"SMTP {code}: {what} at {self.phase.upper()}; not sent")

    def _failed(self, exc: BaseException, fired: bool) -> Delivery:
        detail = f"timeout after {self.budget} ms" if fired else safe_error(exc, [self.provider.password, self.to])
        if self.phase == "connect":
            return not_started("provider_unavailable", f"cannot connect: {detail}")
        if self.phase == "data":
            return ambiguous("transient_failure", f"{detail} during DATA; the message may have been delivered")
        # SMTPNotSupportedError / "no suitable mechanism": the server offers no AUTH we can use.
        unusable_auth = isinstance(exc, smtplib.SMTPException) and not isinstance(exc, smtplib.SMTPServerDisconnected)
        if self.phase == "auth" and unusable_auth:
            return not_started("permanent_rejection", f"authentication impossible: {detail}")
        return not_started("transient_failure", f"{detail} before the message was handed over; not sent")
