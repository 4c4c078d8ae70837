"""Dashboard: response times of every list page and filter over a big PostgreSQL database.

The database ``hai_bench_dash`` on the local server (``HAI_BENCH_POSTGRES_URL``) is seeded once
with 10,000 tasks, 1,000,000 journal rows and 1,000,000 log rows (plus 10,000 queued
notifications and 10,000 audit entries; see bench/_dash_seed.py) and kept for later runs:
seeding takes minutes. ``--reseed`` drops and seeds it again (also needed after changing
--tasks / --journal). The schema is upgraded with ``scheduler_core.db.upgrade`` first.

The dashboard is served by gunicorn exactly as ``hai-scheduler serve`` serves it
(``webapp/gunicorn_conf.py``, gthread workers, a scheduler node in each worker); the script
logs in as ``admin`` (CSRF token from the login page) and times each page of PAGES with
one client, one request at a time: a warm-up request, then ``--requests`` timed ones. A page
that answers 404 (not built yet) is reported as skipped, not as a failure.

    .venv/bin/python bench/dashboard.py                         # seeds on the first run
    .venv/bin/python bench/dashboard.py --requests 50 --reseed
"""

from __future__ import annotations

import html
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests
from _common import BENCH_DIR, PYTHON, SERVERS, base_parser, create_database, database_exists, percentile, print_table
from _dash_seed import counts, seed
from werkzeug.security import generate_password_hash

from scheduler_core.db import close_engine, create_engine, upgrade
from scheduler_core.runtime.accounts import Accounts

DATABASE = "hai_bench_dash"
PASSWORD = "bench-dashboard-admin"  # reset on every run: the kept database may have another one
TASK = "dash-00050"  # a task with executions of every status, an unknown one among them
# The pages measured; edit freely. {task} is replaced by TASK.
PAGES = [
    "/", "/tasks/", "/tasks/?q=kind:api", "/tasks/?q=status:failed", "/tasks/view/{task}",
    "/executions/", "/executions/?status=failed", "/executions/?task={task}", "/executions/unknown",
    "/logs/", "/logs/?task={task}", "/logs/?status=failed", "/logs/failures",
    "/notifications/", "/notifications/dead", "/notifications/unknown",
    "/nodes/", "/audit/",
    "/runs/", "/runs/?q=status:failed", "/runs/?after=dash-05000",  # the run-history grid: 50 tasks x 20 runs
    "/timeline/", "/timeline/?hours=1", "/timeline/?q=team+7&hours=6", "/timeline/?page=300",  # issue #34
    "/tasks/backfill/{task}",
]
TARGET_MS = 300  # issue #34: no page over 300 ms at 10,000 tasks
COLUMNS = [("page", "page"), ("status", "HTTP"), ("median_ms", "median ms"), ("p95_ms", "p95 ms"),
           ("max_ms", "max ms"), ("kib", "KiB"), ("note", "note")]
ROOT = BENCH_DIR.parent


def database_url() -> str:
    from sqlalchemy.engine import make_url

    return make_url(SERVERS["postgresql"]).set(database=DATABASE).render_as_string(hide_password=False)


def ensure_seeded(tasks: int, journal: int, reseed: bool) -> dict[str, Any]:
    """Seed ``hai_bench_dash`` unless it already holds this many tasks and journal rows."""
    url = database_url()
    if database_exists("postgresql", DATABASE) and not reseed:
        engine = create_engine({"url": url, "pool_size": 2})
        try:
            upgrade(engine)
            found = counts(engine)
        finally:
            close_engine(engine)
        if found["tasks"] == tasks and found["executions"] == journal:
            return {"seeded_now": False, **found}
        raise SystemExit(f"{DATABASE} holds {found}; run with --reseed to seed {tasks} tasks / {journal} rows")
    create_database("postgresql", DATABASE, replace=True)
    engine = create_engine({"url": url, "pool_size": 2})
    try:
        began = time.monotonic()
        upgrade(engine)
        found = seed(engine, tasks, journal)
        return {"seeded_now": True, "seed_s": round(time.monotonic() - began, 1), **found}
    finally:
        close_engine(engine)


def reset_admin() -> None:
    engine = create_engine({"url": database_url(), "pool_size": 2})
    try:
        users = Accounts(engine)
        hashed = generate_password_hash(PASSWORD)
        if not users.set_password("admin", hashed):
            users.create("admin", "admin", hashed)
    finally:
        close_engine(engine)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_gunicorn(port: int, workers: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HAI_DATABASE_URL": database_url(), "HAI_ADMIN_PASSWORD": PASSWORD,
           "HAI_SECRET_KEY": secrets.token_hex(32), "HAI_WORKERS": str(workers)}
    env.pop("HAI_TEST_DB_CLOCK_OFFSET_MS", None)
    command = [PYTHON, "-m", "gunicorn", "-c", str(ROOT / "webapp" / "gunicorn_conf.py"), "--bind",
               f"127.0.0.1:{port}", "--workers", str(workers), "webapp.wsgi:app"]
    with log.open("wb") as out:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_ready(base: str, server: subprocess.Popen[bytes], log: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"gunicorn exited with {server.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            if requests.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise SystemExit(f"gunicorn did not answer /healthz within {timeout_s:.0f} s")


def log_in(base: str) -> requests.Session:
    session = requests.Session()
    page = session.get(f"{base}/login", timeout=30)
    found = re.search(r'name="csrf_token"[^>]*value="([^"]+)"', page.text) or \
        re.search(r'value="([^"]+)"[^>]*name="csrf_token"', page.text)
    if found is None:
        raise SystemExit("no csrf_token field on the login page")
    answer = session.post(f"{base}/login", data={"username": "admin", "password": PASSWORD,
                                                 "csrf_token": html.unescape(found.group(1))},
                          allow_redirects=False, timeout=30)
    if answer.status_code not in (302, 303):
        raise SystemExit(f"login failed: HTTP {answer.status_code}")
    return session


def time_page(session: requests.Session, base: str, path: str, count: int) -> dict[str, Any]:
    first = session.get(base + path, allow_redirects=False, timeout=120)  # warm-up, and is it there at all?
    if first.status_code == 404:
        return {"page": path, "status": 404, "note": "skipped: not built yet (404)"}
    times, statuses = [], set()
    for _ in range(count):
        began = time.perf_counter()
        answer = session.get(base + path, allow_redirects=False, timeout=120)
        times.append((time.perf_counter() - began) * 1000)
        statuses.add(answer.status_code)
    note = "" if statuses == {200} else f"answers: {sorted(statuses)}"
    if (percentile(times, 0.5) or 0) > TARGET_MS:
        note = (note + "; " if note else "") + f"median over {TARGET_MS} ms"
    return {"page": path, "status": "/".join(str(s) for s in sorted(statuses)), "median_ms": percentile(times, 0.5),
            "p95_ms": percentile(times, 0.95), "max_ms": max(times), "kib": round(len(answer.content) / 1024, 1),
            "note": note}


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--journal", type=int, default=1_000_000, help="journal rows (and as many log rows)")
    parser.add_argument("--reseed", action="store_true", help=f"drop {DATABASE} and seed it again")
    parser.add_argument("--requests", type=int, default=20, help="timed requests per page")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    args = parser.parse_args()
    if args.journal % args.tasks or args.journal // args.tasks < 15 or args.tasks % 100:
        parser.error("--tasks must be a multiple of 100 and --journal at least 15 rows per task, a whole number each")
    seeded = ensure_seeded(args.tasks, args.journal, args.reseed)
    print(f"[dashboard] {DATABASE}: {seeded}", file=sys.stderr, flush=True)
    reset_admin()
    log = Path(tempfile.mkstemp(prefix="hai-bench-gunicorn-", suffix=".log")[1])
    port = free_port()
    server = start_gunicorn(port, args.workers, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, server, log)
        session = log_in(base)
        rows = [time_page(session, base, path.format(task=TASK), args.requests) for path in PAGES]
    finally:
        server.terminate()
        server.wait(timeout=60)
    print_table(COLUMNS, rows, f"Dashboard on PostgreSQL: {seeded['tasks']:,} tasks, {seeded['executions']:,} journal "
                               f"rows, {seeded['logs']:,} log rows; gunicorn {args.workers} workers; "
                               f"{args.requests} requests per page, one at a time")
    if seeded.get("seeded_now"):
        print(f"\nseeding took {seeded['seed_s']} s")
    log.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
