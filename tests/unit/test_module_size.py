"""Every module in scheduler_core/ and webapp/ is at most 400 lines.

A module past that has usually grown a second concept: split it where the concept divides (as
model.py gave task_policies.py its policies, and the node its run pool), and say where each part
lives in docs/architecture.md.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scheduler_core", "webapp")
MAX_LINES = 400


def test_modules_are_at_most_400_lines() -> None:
    paths = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    assert len(paths) > 100
    too_long = {str(path.relative_to(ROOT)): lines for path in paths
                if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert too_long == {}, "split these where a concept divides"
