"""The wheel ships every template (in its blueprint's folder too) and every static file.

An installed dashboard finds them inside the package (``webapp/templates``, ``webapp/static``);
the Dockerfile installs from the same wheel. The wheel is built here from a copy of what the
Dockerfile copies, with the project's own setuptools (no download).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("pyproject.toml", "setup.py", "README.md", "scheduler_core", "webapp", "templates", "static")


def _build_wheel(tmp_path: Path) -> set[str]:
    source = tmp_path / "source"
    source.mkdir()
    for name in COPIED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                            "--no-index", "--wheel-dir", str(tmp_path / "dist"), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def _assets(folder: str) -> set[str]:
    return {f"webapp/{folder}/{path.relative_to(ROOT / folder).as_posix()}"
            for path in (ROOT / folder).rglob("*") if path.is_file() and not path.name.startswith(".")}


def test_the_wheel_holds_every_template_and_static_file(tmp_path: Path) -> None:
    shipped = _build_wheel(tmp_path)
    templates, static = _assets("templates"), _assets("static")
    assert any(name.count("/") > 2 for name in templates), "expected templates in blueprint folders"
    assert {"webapp/templates/base.html", "webapp/static/htmx.min.js"} <= templates | static
    assert not (templates | static) - shipped, sorted((templates | static) - shipped)
