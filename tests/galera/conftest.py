"""Fixtures of the Galera suite: a real 3-node MariaDB Galera Cluster from Debian's packages.

``galera`` (one per module) is three ``mariadbd`` nodes on free local ports (tests/galera/cluster.py).
Without the packages the tests are skipped, or fail when ``HAI_TEST_REQUIRE`` contains ``galera``.
Every test here is marked ``galera`` so the main run can leave them out (``-m "not galera"``) and
run them as a step of their own (``pytest tests/galera``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.galera.cluster import GaleraCluster, unavailable_reason

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "galera: starts a real MariaDB Galera Cluster (tests/galera); left out of the main run "
        "with -m 'not galera', run on its own with pytest tests/galera")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # this hook sees the whole session's items: mark only ours
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.galera)


def require_galera() -> None:
    problem = unavailable_reason()
    if problem is None:
        return
    if "galera" in {n.strip() for n in os.environ.get("HAI_TEST_REQUIRE", "").split(",")}:
        pytest.fail(f"{problem} (required by HAI_TEST_REQUIRE)")
    pytest.skip(problem)


@pytest.fixture(scope="module")
def galera() -> Iterator[GaleraCluster]:
    """Three Galera nodes on free local ports, for the module."""
    require_galera()
    cluster = GaleraCluster(verbose=True)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
