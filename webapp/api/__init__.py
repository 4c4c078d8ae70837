"""The JSON API, ``/api/v1``: the dashboard's operations for pipelines and tools.

``core.py`` holds what every operation goes through (token, rate limit, role, validation,
problem details), ``schemas.py`` the pydantic models (the task models, derived from the task's
declared fields, in ``task_schemas.py``), ``tasks.py`` and ``operations.py`` the
handlers (on the same runtime services the pages use), ``openapi.py`` the generated document.
"""

from __future__ import annotations

from webapp.api import openapi, operations, tasks
from webapp.api.core import OPERATIONS, bp

__all__ = ["OPERATIONS", "bp", "openapi", "operations", "tasks"]
