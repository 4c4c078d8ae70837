"""gunicorn configuration for ``hai-scheduler serve``: one scheduler node per worker.

The node starts in ``post_worker_init`` -- after the fork, because threads (the tick loop, the
lease keeper, the handler pool) do not survive a fork -- and is closed in ``worker_exit`` so
its running attempts are handed over cleanly (docs/semantics.md, "Lifecycle").
"""

from __future__ import annotations

from typing import Any

from scheduler_core.settings import read_settings

_settings = read_settings()  # HAI_BIND, HAI_WORKERS, HAI_THREADS, checked (serve passes its flags on top)
bind = _settings.bind
workers = _settings.workers
threads = _settings.threads
worker_class = "webapp.gunicorn_worker.ProblemWorker"  # gthread, with a too-long request line as a problem
timeout = 60
graceful_timeout = 30
accesslog = "-"
preload_app = False  # each worker builds its app (and scheduler threads) after the fork


def post_worker_init(worker: Any) -> None:
    from webapp.node import start_node

    start_node(worker.wsgi)


def worker_exit(server: Any, worker: Any) -> None:
    from webapp.node import stop_node

    app = getattr(worker, "wsgi", None)
    if app is not None:
        stop_node(app)
