"""Node clocks never decide a lease or an occurrence: no wall-clock reads in store/ or runtime/.

The database clock (``db_now_ms()``) decides; the node's monotonic clock may pace sleeps and
estimate display timestamps. This test keeps it that way.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "scheduler_core"
FORBIDDEN = re.compile(r"func\.now\(|datetime\.now\(|datetime\.utcnow\(|time\.time\(|CURRENT_TIMESTAMP|\bNOW\(")


@pytest.mark.parametrize("package", ["store", "runtime"])
def test_no_node_clock_in_decisions(package: str) -> None:
    offenders = [
        f"{path.relative_to(ROOT.parent)}:{number}: {line.strip()}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if FORBIDDEN.search(line) and not line.lstrip().startswith("#")
    ]
    assert offenders == []
