"""Notifications: the delivery queue, dead letters, unknown deliveries, templates, providers."""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("notifications", __name__, url_prefix="/notifications")
