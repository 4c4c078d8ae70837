"""Fixtures of the Galera suite: a real 3-node MariaDB Galera Cluster from Debian's packages.

``galera`` (one per module) is three ``mariadbd`` nodes on free local ports (tests/galera/cluster.py).
Without the packages the tests are skipped, or fail when ``HAI_TEST_REQUIRE`` contains ``galera``.
Every test here is marked ``galera`` so the main run can leave them out (``-m "not galera"``) and
run them as a step of their own (``pytest tests/galera``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.galera.cluster import GaleraCluster, unavailable_reason
from tests.helpers import topology_suite as suite

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    suite.register(config, "galera", "starts a real MariaDB Galera Cluster (tests/galera); left out of the main "
                   "run with -m 'not galera', run on its own with pytest tests/galera")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    suite.mark_directory(items, HERE, "galera")


def require_galera() -> None:
    problem = unavailable_reason()
    if problem is not None:
        suite.unavailable(problem, "galera")


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
