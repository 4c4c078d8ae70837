"""Repositories: every SQL statement of the product lives in this package."""

from scheduler_core.store.executions import ClaimOutcome, ClaimRequest, ClaimResult, ExecutionRepository
from scheduler_core.store.logs import LogFilter, LogRepository
from scheduler_core.store.nodes import NodeInfo, NodeRepository
from scheduler_core.store.tasks import TaskRepository, TickSnapshot

__all__ = [
    "ClaimOutcome",
    "ClaimRequest",
    "ClaimResult",
    "ExecutionRepository",
    "LogFilter",
    "LogRepository",
    "NodeInfo",
    "NodeRepository",
    "TaskRepository",
    "TickSnapshot",
]
