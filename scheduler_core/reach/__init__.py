"""Notifications ("reach"): providers, templates, do-not-disturb and a durable delivery queue."""

from scheduler_core.reach.base import Delivery, Provider, RenderedMessage
from scheduler_core.reach.config import DndConfig, QueuePolicy, ReachConfig
from scheduler_core.reach.queue import RoundReport
from scheduler_core.reach.service import Reach, SendResult

__all__ = ["Delivery", "DndConfig", "Provider", "QueuePolicy", "Reach", "ReachConfig", "RenderedMessage",
           "RoundReport", "SendResult"]
