"""The operator dashboard (Flask + HTMX). It calls scheduler_core only; it holds no SQL of its own."""

from webapp.app import create_app

__all__ = ["create_app"]
