"""hai-scheduler: a distributed cron scheduler whose only coordination point is one SQL database."""

from scheduler_core.errors import ConfigError, DatabaseError, SchedulerError

__version__ = "0.1.0"

__all__ = ["ConfigError", "DatabaseError", "SchedulerError", "__version__"]
