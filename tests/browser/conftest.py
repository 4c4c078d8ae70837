"""Browser tests: Playwright drives Debian's Chromium against the dashboard served by gunicorn.

The dashboard runs as a real ``hai-scheduler serve`` process on 127.0.0.1 (a free port), on a
SQLite file of its own, with a webhook notification provider pointed at a real recording HTTP
server. Chromium is ``/usr/bin/chromium`` (``apt-get install chromium``; ``playwright install``
cannot download browsers here); ``HAI_TEST_CHROMIUM`` names another binary. A missing browser
fails the run when ``HAI_TEST_REQUIRE`` contains ``browser`` (CI sets it), else skips.

Screenshots of every page visited go to ``test-output/screenshots/`` (``HAI_TEST_OUTPUT``
overrides the folder) for a person to review.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.helpers.http_server import RecordingServer
from tests.helpers.served import free_port

pytestmark = pytest.mark.slow
CHROMIUM = os.environ.get("HAI_TEST_CHROMIUM", "/usr/bin/chromium")
ADMIN_PASSWORD = "browser admin pw"
ROOT = Path(__file__).resolve().parents[2]


def _require_browser() -> None:
    required = {n.strip() for n in os.environ.get("HAI_TEST_REQUIRE", "").split(",")}
    problem = None
    if not Path(CHROMIUM).exists():
        problem = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "the playwright package is not installed"
    if problem:
        if "browser" in required:
            pytest.fail(f"{problem} (required by HAI_TEST_REQUIRE)")
        pytest.skip(problem)


@dataclass
class Dashboard:
    url: str
    database_url: str
    receiver: RecordingServer
    reach_config: dict[str, Any]
    process: subprocess.Popen[str]

    def __call__(self, path: str) -> str:
        return f"{self.url}{path}"


def _wait_healthy(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(f"{url}/healthz", timeout=5).status_code == 200:
                return
        except requests.RequestException:  # not listening yet, or the worker is still starting
            pass
        if process.poll() is not None:
            raise AssertionError(f"the dashboard exited: {process.communicate()[1][-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError("the dashboard did not answer /healthz within 60 s")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """``hai-scheduler serve`` (one worker, so one node) on a fresh SQLite file."""
    _require_browser()
    folder = tmp_path_factory.mktemp("served")
    with RecordingServer() as receiver:
        reach_config = {"providers": [{"name": "webhook", "type": "api", "url": receiver.url("/status/400"),
                                       "idempotent": True, "headers": {"Authorization": "Bearer hook-secret-1"}}]}
        (folder / "reach.json").write_text(json.dumps(reach_config))
        database_url = f"sqlite:///{folder}/dashboard.db"
        port = free_port()
        env = {**os.environ, "HAI_DATABASE_URL": database_url, "HAI_ADMIN_PASSWORD": ADMIN_PASSWORD,
               "HAI_REACH_CONFIG": str(folder / "reach.json"), "HAI_THREADS": "4"}
        with served(env, folder, port) as process:
            yield Dashboard(f"http://127.0.0.1:{port}", database_url, receiver, reach_config, process)


@contextmanager
def served(env: dict[str, str], folder: Path, port: int) -> Iterator[subprocess.Popen[str]]:
    """``hai-scheduler serve`` (one worker) on 127.0.0.1:``port`` with ``env`` (no HAI_SECRET_KEY: a
    key file is made in ``folder``), healthy when this yields; stopped by SIGTERM afterwards."""
    env = {name: value for name, value in env.items() if name != "HAI_SECRET_KEY"}
    process = subprocess.Popen([sys.executable, "-m", "webapp.cli", "serve", "--bind", f"127.0.0.1:{port}",
                                "--workers", "1"], env=env, cwd=folder, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", process)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def screenshot_dir() -> Path:
    folder = Path(os.environ.get("HAI_TEST_OUTPUT", ROOT / "test-output")) / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Screens:
    """Saves a full-page screenshot per step, named after the test and the step."""

    def __init__(self, test_name: str) -> None:
        self._prefix = re.sub(r"[^A-Za-z0-9_-]+", "-", test_name)
        self._count = 0

    def __call__(self, page: Any, step: str) -> Path:
        self._count += 1
        path = screenshot_dir() / f"{self._prefix}-{self._count:02d}-{step}.png"
        page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def shot(request: pytest.FixtureRequest) -> Screens:
    return Screens(request.node.name)


@pytest.fixture
def page(browser: Any, dashboard: Dashboard) -> Iterator[Any]:
    """A fresh browser context (own cookies), in the system's light scheme, logged out."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id="Europe/Berlin")
    context.set_default_timeout(15_000)
    errors: list[str] = []
    tab = context.new_page()
    # Script errors and CSP violations fail the test; an HTTP error status (a refused login
    # answers 401) is logged by Chromium as "Failed to load resource" and is the tests' business.
    tab.on("console", lambda message: errors.append(message.text) if message.type == "error"
           and not message.text.startswith("Failed to load resource") else None)
    tab.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield tab
    finally:
        context.close()
    assert not errors, f"the browser reported errors (CSP violations, script errors): {errors}"


def login(page: Any, dashboard: Dashboard, name: str = "admin", password: str = ADMIN_PASSWORD) -> None:
    page.goto(dashboard("/login"))
    page.get_by_label("Username").fill(name)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r".*/$"))
