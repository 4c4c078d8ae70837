"""Fixtures of the HA suite: a real pg_auto_failover formation started from Debian's packages.

``ha_cluster`` (one per module) is a monitor, a primary and a synchronous standby;
``ha_cluster_factory`` makes others (``standby_faketime="+5s"``, ``synchronous=False``, ...) that
are stopped when the test ends. Without pg_autoctl the tests are skipped, or fail when
``HAI_TEST_REQUIRE`` contains ``ha``. Every test here is marked ``ha`` so the main run can leave
them out (``-m "not ha"``) and run them as a step of their own (``pytest tests/ha``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ha.cluster import Cluster, faketime_library, unavailable_reason
from tests.helpers import topology_suite as suite

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    suite.register(config, "ha", "starts a real highly available PostgreSQL (pg_auto_failover, tests/ha); "
                   "left out of the main run with -m 'not ha', run on its own with pytest tests/ha")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    suite.mark_directory(items, HERE, "ha")


def require_ha(**options: Any) -> None:
    """Skip (fail when required) unless this machine can run a Cluster with ``options``."""
    problem = unavailable_reason()
    if problem is None and options.get("standby_faketime") and not faketime_library():
        problem = "libfaketime is not installed (apt-get install faketime)"
    if problem:
        suite.unavailable(problem, "ha")


@pytest.fixture(scope="module")
def ha_cluster() -> Iterator[Cluster]:
    """A monitor, a primary and a synchronous standby on free local ports, for the module."""
    require_ha()
    cluster = Cluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def ha_cluster_factory() -> Iterator[Callable[..., Cluster]]:
    """``make(**options)`` starts another Cluster (see its arguments); all stopped after the test."""
    made: list[Cluster] = []

    def make(**options: Any) -> Cluster:
        require_ha(**options)
        cluster = Cluster(**options)
        made.append(cluster)
        return cluster.start()

    try:
        yield make
    finally:
        for cluster in made:
            cluster.stop()
