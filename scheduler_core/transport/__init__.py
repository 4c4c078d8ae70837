"""Deadline-bound network transport shared by the ``api`` executor and the notification providers.

:func:`exchange` sends one HTTP request and reads its answer under one deadline (and an optional
cancellation signal), reporting whether a connection was established, which is the line between
"nothing was sent" and "the request may have reached the server". :class:`Watchdog` is the
deadline alone, for other protocols (SMTP). See docs/executors-and-providers.md.
"""

from scheduler_core.transport.deadline import Cancellation, StopCause, Watchdog, shutdown_socket
from scheduler_core.transport.exchange import HttpRequest, HttpResult, exchange, root_cause

__all__ = ["Cancellation", "HttpRequest", "HttpResult", "StopCause", "Watchdog", "exchange", "root_cause",
           "shutdown_socket"]
