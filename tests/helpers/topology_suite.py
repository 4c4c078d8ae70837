"""What a suite that starts its own database topology (tests/ha, tests/galera) needs from pytest:
its marker registered, every test under its directory marked with it (so the main run leaves it
out with ``-m "not <marker>"``), and a missing package turned into a skip -- or a failure when
``HAI_TEST_REQUIRE`` names the marker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def register(config: pytest.Config, marker: str, description: str) -> None:
    config.addinivalue_line("markers", f"{marker}: {description}")


def mark_directory(items: list[pytest.Item], directory: Path, marker: str) -> None:
    """The collection hook sees the whole session's items: mark only those under ``directory``."""
    for item in items:
        if directory in Path(str(item.path)).resolve().parents:
            item.add_marker(getattr(pytest.mark, marker))


def unavailable(problem: str, marker: str) -> None:
    """Skip for ``problem``; fail instead when ``HAI_TEST_REQUIRE`` contains ``marker``."""
    if marker in {n.strip() for n in os.environ.get("HAI_TEST_REQUIRE", "").split(",")}:
        pytest.fail(f"{problem} (required by HAI_TEST_REQUIRE)")
    pytest.skip(problem)
