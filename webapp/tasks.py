"""Tasks: list with search, create / edit forms (api and hook), enable / disable, delete, trigger, detail."""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("tasks", __name__, url_prefix="/tasks")
