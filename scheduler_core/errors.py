"""Error types with stable codes.

Two roots: :class:`SchedulerError` (``hai:scheduler:0NN``; the database layer's
``hai:reldb:0NN`` errors derive from it) and :class:`ReachError` for notifications
(``hai:reach:0NN``). An invalid value is a :class:`ConfigurationError` on either side:
:class:`ConfigError` under SchedulerError, :class:`ReachConfigError` under ReachError. Codes are
the contract shown by the dashboard and written to logs; messages are for people and may change.
"""

from __future__ import annotations

from typing import Any


class _CodedError(Exception):
    """An error with a stable ``code``, a message for people, and structured details."""

    code = ""
    name = ""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def __str__(self) -> str:
        return f"{self.code} {self.message}"


class ConfigurationError(_CodedError):
    """Root of the invalid-value errors, ConfigError and ReachConfigError; ``field`` names the
    value (dotted path). Neither is under the other's root: each keeps its own root and code."""

    def __init__(self, field: str, message: str, **details: Any) -> None:
        super().__init__(f"{field}: {message}", field=field, **details)
        self.field = field


class SchedulerError(_CodedError):
    """Root of every error raised by scheduler_core (the notification module has ReachError)."""

    code = "hai:scheduler:023"
    name = "EXECUTION_FAILED"


class NotInitializedError(SchedulerError):
    code, name = "hai:scheduler:010", "NOT_INITIALIZED"


class InitFailedError(SchedulerError):
    code, name = "hai:scheduler:011", "INIT_FAILED"


class ConfigError(ConfigurationError, SchedulerError):
    """A configuration value is invalid; ``field`` names it (dotted path)."""

    code, name = "hai:scheduler:012", "CONFIG_ERROR"


class TaskNotFoundError(SchedulerError):
    code, name = "hai:scheduler:020", "TASK_NOT_FOUND"


class TaskAlreadyExistsError(SchedulerError):
    code, name = "hai:scheduler:021", "TASK_ALREADY_EXISTS"


class InvalidCronError(SchedulerError):
    code, name = "hai:scheduler:022", "INVALID_CRON"


class ExecutionFailedError(SchedulerError):
    code, name = "hai:scheduler:023", "EXECUTION_FAILED"


class JsExecutionFailedError(SchedulerError):
    code, name = "hai:scheduler:024", "JS_EXECUTION_FAILED"


class ApiExecutionFailedError(SchedulerError):
    code, name = "hai:scheduler:025", "API_EXECUTION_FAILED"


class DbSaveFailedError(SchedulerError):
    code, name = "hai:scheduler:026", "DB_SAVE_FAILED"


class AlreadyRunningError(SchedulerError):
    code, name = "hai:scheduler:027", "ALREADY_RUNNING"


class NotRunningError(SchedulerError):
    code, name = "hai:scheduler:028", "NOT_RUNNING"


class JsCompileFailedError(SchedulerError):
    code, name = "hai:scheduler:030", "JS_COMPILE_FAILED"


class HookExecutionFailedError(SchedulerError):
    code, name = "hai:scheduler:031", "HOOK_EXECUTION_FAILED"


class LogPersistFailedError(SchedulerError):
    code, name = "hai:scheduler:032", "LOG_PERSIST_FAILED"


# --- database layer -------------------------------------------------------------


class DatabaseError(SchedulerError):
    """Root of database-layer errors (``hai:reldb:*``)."""

    code, name = "hai:reldb:002", "QUERY_FAILED"


class DatabaseConnectionError(DatabaseError):
    """The database could not be reached or failed its health check."""

    code, name = "hai:reldb:001", "CONNECTION_FAILED"


class DatabaseCloseError(DatabaseError):
    """Releasing the engine's connections failed; the caller should retry ``close``."""

    code, name = "hai:reldb:003", "CLOSE_FAILED"


class InvalidStoredValueError(DatabaseError):
    """A value read from the database is not what the schema promises."""

    code, name = "hai:reldb:004", "INVALID_VALUE"


class MigrationError(DatabaseError):
    code, name = "hai:reldb:005", "MIGRATION_FAILED"


class DatabaseConfigError(ConfigError):
    """Invalid database configuration; ``field`` names the offending setting."""

    code, name = "hai:reldb:012", "CONFIG_ERROR"


class GaleraSettingError(DatabaseError):
    """A Galera node set up so that a scheduler rule cannot hold through it (the message names
    the setting and the value it needs)."""

    code, name = "hai:reldb:013", "GALERA_SETTING"


class ClockSkewError(DatabaseError):
    """The database clocks the scheduler nodes write through disagree by more than the tolerance
    (Galera: each node has its own clock)."""

    code, name = "hai:reldb:014", "CLOCK_SKEW"


# --- conflicts, missing executions, skipped tasks (033+) ----------------------------


class ConflictError(SchedulerError):
    """A compare-and-set lost: the row changed since the caller read it (stale version)."""

    code, name = "hai:scheduler:033", "CONFLICT"


class ExecutionNotFoundError(SchedulerError):
    code, name = "hai:scheduler:034", "EXECUTION_NOT_FOUND"


class SchedulerTaskSkippedError(SchedulerError):
    """Raised by a host handler to say "not this time": the attempt ends ``interrupted``."""

    code, name = "hai:scheduler:035", "TASK_SKIPPED"


# --- notifications (reach) --------------------------------------------------------------


class ReachError(_CodedError):
    """Root of every error raised by scheduler_core.reach (``hai:reach:0NN``)."""

    code = "hai:reach:001"
    name = "SEND_FAILED"


class SendFailedError(ReachError):
    code, name = "hai:reach:001", "SEND_FAILED"


class TemplateNotFoundError(ReachError):
    code, name = "hai:reach:002", "TEMPLATE_NOT_FOUND"


class TemplateRenderFailedError(ReachError):
    code, name = "hai:reach:003", "TEMPLATE_RENDER_FAILED"


class InvalidRecipientError(ReachError):
    code, name = "hai:reach:004", "INVALID_RECIPIENT"


class ProviderNotFoundError(ReachError):
    code, name = "hai:reach:005", "PROVIDER_NOT_FOUND"


class DndBlockedError(ReachError):
    code, name = "hai:reach:006", "DND_BLOCKED"


class ReachNotInitializedError(ReachError):
    code, name = "hai:reach:010", "NOT_INITIALIZED"


class UnsupportedTypeError(ReachError):
    code, name = "hai:reach:011", "UNSUPPORTED_TYPE"


class ReachConfigError(ConfigurationError, ReachError):
    """Invalid notification configuration or input; ``field`` names it."""

    code, name = "hai:reach:012", "CONFIG_ERROR"


class DeliveryRejectedError(ReachError):
    """The provider answered with a definite, permanent refusal."""

    code, name = "hai:reach:020", "DELIVERY_REJECTED"
