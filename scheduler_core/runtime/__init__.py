"""The node runtime: scheduler lifecycle, tick loop, runners, leases."""

from scheduler_core.runtime.execution_operations import RepairResult
from scheduler_core.runtime.hooks import Hooks, TaskEvent
from scheduler_core.runtime.scheduler import Scheduler

__all__ = ["Hooks", "RepairResult", "Scheduler", "TaskEvent"]
