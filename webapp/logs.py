"""Logs: filters with keyset pagination; log failures with repair and repair-all."""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("logs", __name__, url_prefix="/logs")
