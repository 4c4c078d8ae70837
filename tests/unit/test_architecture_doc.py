"""Every file, folder and module that docs/architecture.md and docs/executors-and-providers.md name
exists, so a renamed or deleted module cannot leave the design documents pointing at nothing.

A path is read from inline code (`store/executions.py`), a link target, a diagram (a fenced block
without a language, such as the layer picture), or prose (`bench/RESULTS.md`): a name ending in
``/`` or in a file extension. A dotted name (`scheduler_core.store`,
`scheduler_core.testing.set_clock_offset`) must name a module, or a name a module defines. A path
is taken from the repository's root, ``scheduler_core/``, ``webapp/`` or ``docs/``; a bare module
name (`recovery.py`, listed after its package) from any package of the product. Placeholders
(`executors/<kind>.py`) and routes (`/tasks/view/<id>`) are not paths.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ("docs/architecture.md", "docs/executors-and-providers.md")
BASES = (ROOT, ROOT / "scheduler_core", ROOT / "webapp", ROOT / "docs")
PACKAGES = tuple(sorted({path.parent for name in ("scheduler_core", "webapp")
                         for path in (ROOT / name).rglob("*.py") if "__pycache__" not in path.parts}))
EXTENSIONS = ("py", "md", "html", "js", "css", "json", "toml", "yml", "yaml", "txt", "sh", "cfg", "ini")

_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_WORD = re.compile(r"(?<![\w./:-])[\w][\w./-]*")
_PATH = re.compile(rf"[\w][\w.-]*(?:/[\w.-]+)*(?:/|\.(?:{'|'.join(EXTENSIONS)}))")
_PROSE_PATH = re.compile(rf"(?<![\w./`-])[\w-]+(?:/[\w.-]+)+\.(?:{'|'.join(EXTENSIONS)})(?![\w/])")
_DOTTED = re.compile(r"(?:scheduler_core|webapp)(?:\.\w+)+")


def names(text: str) -> Iterator[str]:
    """Every path-like or dotted name the text writes (see the module docstring)."""
    for code in _CODE.findall(_FENCE.sub("", text)):
        yield code.strip().rstrip("()")
    for target in _LINK.findall(text):
        if "://" not in target and not target.startswith("#"):
            yield target.partition("#")[0]
    for language, block in _FENCE.findall(text):
        if not language.strip():  # a diagram; code in a language (json, python) is an example
            yield from _WORD.findall(block)
    yield from _PROSE_PATH.findall(_CODE.sub("", _FENCE.sub("", text)))


def _is_path(name: str) -> bool:
    return _PATH.fullmatch(name) is not None and not name.startswith(("/", ".")) and "//" not in name


def _exists(name: str, document: Path) -> bool:
    if "/" not in name.rstrip("/"):  # a bare name: any package, or next to the document
        candidates = [document.parent / name, *(base / name for base in BASES), *(p / name for p in PACKAGES)]
    else:
        candidates = [document.parent / name, *(base / name for base in BASES)]
    wanted_dir = name.endswith("/")
    return any(path.is_dir() if wanted_dir else path.exists() for path in candidates)


def _module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _defines(path: Path, name: str) -> bool:
    """Whether the module's top level defines or imports ``name`` (read, never imported: importing
    ``webapp.wsgi`` would build an app and a database)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Name) and target.id == name for target in targets):
                return True
        if isinstance(node, ast.ImportFrom | ast.Import) and any(
                (alias.asname or alias.name.split(".")[0]) == name for alias in node.names):
            return True
    return False


def _imports(dotted: str) -> bool:
    """A module of the product, or a name a module of it defines (``module.name``; attributes of that
    name are not followed)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = _module_file(".".join(parts[:cut]))
        if path is not None:
            return cut == len(parts) or _defines(path, parts[cut])
    return False


def missing(text: str, document: Path) -> list[str]:
    """The names ``text`` writes that name nothing in the repository, in order, once each."""
    gone: list[str] = []
    for name in dict.fromkeys(names(text)):
        if _DOTTED.fullmatch(name):
            if not _imports(name):
                gone.append(name)
        elif _is_path(name) and not _exists(name, document):
            gone.append(name)
    return gone


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_path_the_document_names_exists(document: str) -> None:
    path = ROOT / document
    text = path.read_text(encoding="utf-8")
    assert len([name for name in names(text) if _is_path(name) or _DOTTED.fullmatch(name)]) >= 5
    assert missing(text, path) == [], f"{document} names paths that do not exist"


def test_a_stale_name_is_found_wherever_it_is_written() -> None:
    doc = ROOT / DOCUMENTS[0]
    text = """
```
   executors/http_watch.py      scheduler_core.gone
```
the watched-HTTP helpers (`executors/http_watch.py`), [old](old-page.md#x), see bench/NOPE.md;
`scheduler_core.testing.no_such_function`, `recovery.py` and `runtime/recovery.py` exist,
`executors/<kind>.py` is a placeholder and `/tasks/view/<id>` a route; `text/plain` is no path.
"""
    assert missing(text, doc) == ["executors/http_watch.py", "scheduler_core.testing.no_such_function",
                                  "old-page.md", "scheduler_core.gone", "bench/NOPE.md"]


def unnamed_modules(text: str) -> list[str]:
    """The product's modules (``__init__.py`` and migrations aside) that docs/architecture.md names
    nowhere: not by a path from the repository or its package, nor by a tail of that path (a bare
    ``recovery.py`` listed after its package), nor as a dotted name."""
    named = set(names(text))
    gone = []
    for package in ("scheduler_core", "webapp"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT / package)
            if "__pycache__" in relative.parts or "migrations" in relative.parts or path.name == "__init__.py":
                continue
            parts = relative.parts
            tails = {"/".join(parts[cut:]) for cut in range(len(parts))}
            dotted = ".".join((package, *relative.with_suffix("").parts))
            if not (tails | {f"{package}/{relative.as_posix()}", dotted}) & named:
                gone.append(f"{package}/{relative.as_posix()}")
    return gone


def test_every_module_of_the_product_is_named_in_the_architecture() -> None:
    text = (ROOT / DOCUMENTS[0]).read_text(encoding="utf-8")
    assert unnamed_modules(text) == [], "docs/architecture.md does not name these modules (section 2's table)"
    assert "scheduler_core/runtime/clock_watch.py" in unnamed_modules(text.replace("clock_watch.py", "clock.py"))
