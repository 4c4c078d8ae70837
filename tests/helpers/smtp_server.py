"""A real SMTP server on 127.0.0.1 (aiosmtpd, ephemeral port) that records what it accepts.

Switches, settable at any time: ``reject_rcpt`` / ``reject_data`` (an SMTP reply such as
``"550 5.1.1 No such user"`` returned at RCPT TO or after the message content), ``data_delay_s``
(hold the reply to DATA, for deadline tests). ``users`` enables AUTH (PLAIN / LOGIN) without
TLS, as tests need; ``auth=False`` offers no AUTH at all.

    with SmtpServer(users={"robot": "s3cret"}) as server:
        ... send to 127.0.0.1:server.port ...
        server.messages[0].message["Subject"]
"""

from __future__ import annotations

import asyncio
import email
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.policy import default as default_policy
from types import TracebackType
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


@dataclass
class ReceivedMail:
    """One accepted message: the envelope and the parsed message."""

    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    raw: bytes

    @property
    def body(self) -> str:
        part = self.message.get_body(("plain",))
        assert part is not None
        return str(part.get_content()).replace("\r\n", "\n")  # CRLF on the wire


@dataclass
class _State:
    reject_rcpt: str | None = None
    reject_data: str | None = None
    data_delay_s: float = 0.0
    messages: list[ReceivedMail] = field(default_factory=list)
    logins: list[tuple[str, bool]] = field(default_factory=list)  # (user, accepted)
    data_attempts: int = 0


class _Handler:
    def __init__(self, state: _State) -> None:
        self.state = state

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                          rcpt_options: list[str]) -> str:
        if self.state.reject_rcpt:
            return self.state.reject_rcpt
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.state.data_attempts += 1
        if self.state.data_delay_s:
            await asyncio.sleep(self.state.data_delay_s)
        if self.state.reject_data:
            return self.state.reject_data
        raw = bytes(envelope.content)
        parsed = email.message_from_bytes(raw, policy=default_policy)
        assert isinstance(parsed, EmailMessage)
        self.state.messages.append(ReceivedMail(envelope.mail_from, list(envelope.rcpt_tos), parsed, raw))
        return "250 2.0.0 Message accepted"


class _EphemeralController(Controller):
    """aiosmtpd's controller, bound to port 0: it learns the real port before its start-up probe."""

    def _trigger_server(self) -> None:
        assert isinstance(self.server, asyncio.Server)
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()  # type: ignore[no-untyped-call]


class SmtpServer:
    """The server, running on its own event loop thread until :meth:`close` (or the ``with`` block ends)."""

    def __init__(self, users: dict[str, str] | None = None, auth: bool = True) -> None:
        self.state = _State()
        self.users = dict(users or {})
        options: dict[str, Any] = {"server_hostname": "smtp.test", "ready_timeout": 5.0}
        if auth:
            options.update(authenticator=self._authenticate, auth_require_tls=False)
        self._controller = _EphemeralController(_Handler(self.state), hostname="127.0.0.1", port=0, **options)
        self._controller.start()
        self.port: int = self._controller.port

    def _authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> Any:
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        user, password = auth_data.login.decode(), auth_data.password.decode()
        accepted = self.users.get(user) == password
        self.state.logins.append((user, accepted))
        return AuthResult(success=accepted, handled=False)

    # --- switches and records ------------------------------------------------------------

    @property
    def messages(self) -> list[ReceivedMail]:
        return self.state.messages

    @property
    def logins(self) -> list[tuple[str, bool]]:
        return self.state.logins

    @property
    def data_attempts(self) -> int:
        return self.state.data_attempts

    def reject_at_rcpt(self, reply: str | None) -> None:
        self.state.reject_rcpt = reply

    def reject_at_data(self, reply: str | None) -> None:
        self.state.reject_data = reply

    def delay_data(self, seconds: float) -> None:
        self.state.data_delay_s = seconds

    # --- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        self._controller.stop()

    def __enter__(self) -> SmtpServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
