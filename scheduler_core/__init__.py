"""hai-scheduler: a distributed cron scheduler whose only coordination point is one SQL database."""

from scheduler_core.config import SchedulerConfig
from scheduler_core.errors import ConfigError, DatabaseError, SchedulerError, SchedulerTaskSkippedError
from scheduler_core.model import ExecutionLog, TaskDefinition
from scheduler_core.runtime import Scheduler, TaskEvent
from scheduler_core.task_policies import RetryPolicy

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DatabaseError",
    "ExecutionLog",
    "RetryPolicy",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerError",
    "SchedulerTaskSkippedError",
    "TaskDefinition",
    "TaskEvent",
    "__version__",
]
