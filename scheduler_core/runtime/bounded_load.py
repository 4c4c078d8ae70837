"""YAML and JSON read from an untrusted file with bounds, for task files (``tasks apply``).

A file is untrusted input. YAML's aliases let a few hundred bytes stand for a value of billions
of nodes (the "billion laughs"): ``yaml.safe_load`` builds it cheaply with shared references, and
the first walk over it (``${ENV}`` resolution, validation) never ends. Here the composer counts
while it reads and refuses, before anything is constructed or walked, a document whose value —
each alias counted as the whole value it repeats — exceeds:

* ``MAX_ALIASES`` alias uses,
* ``MAX_DEPTH`` levels of nesting,
* ``MAX_NODES`` nodes (scalars, lists and mappings),
* ``MAX_CHARS`` characters in its scalars (what the size cap allows a file without aliases).

It also refuses an alias to the value that contains it (a recursive value) and a key repeated in
one mapping (YAML's own merge key ``<<`` may still be overridden). JSON has no aliases, so its
value is bounded by the file's size; it is checked for depth (before ``json.loads`` would recurse
into a deep nest) and repeated keys. Every refusal is a ConfigError on ``FILE`` naming the file,
the bound and, when known, the line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, Event, ScalarEvent
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner, ScannerError

from scheduler_core.errors import ConfigError
from scheduler_core.validation import MAX_JSON_DEPTH, shown

try:  # libyaml's parser reads about five times faster than PyYAML's own; the composer stays ours
    from yaml.cyaml import CParser as _EventParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _EventParser = None

MAX_FILE_BYTES = 10 * 1024 * 1024
MAX_ALIASES = 10_000
MAX_DEPTH = MAX_JSON_DEPTH + 8  # a task's params or handler nest up to MAX_JSON_DEPTH below the file's 3 levels
MAX_NODES = MAX_FILE_BYTES // 4  # more than a file of compact task entries at the size cap holds
MAX_CHARS = MAX_FILE_BYTES
_MERGE = "tag:yaml.org,2002:merge"
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")


@dataclass(frozen=True)
class Loaded:
    """A file's value, and the line of each mapping key where the format tells it (YAML)."""

    value: Any
    key_lines: dict[int, tuple[Any, dict[Any, int]]] = field(default_factory=dict)  # id(mapping) -> it, lines

    def line(self, mapping: Any, key: Any) -> int | None:
        """The line ``key`` of ``mapping`` (a dict of this value) was written on, or None."""
        held = self.key_lines.get(id(mapping))
        return held[1].get(key) if held is not None and held[0] is mapping else None


@dataclass(frozen=True)
class _Extent:
    """What an anchored node adds wherever an alias repeats it."""

    nodes: int  # nodes in it, itself included
    chars: int  # characters of its scalars
    height: int  # levels, itself included


def load_yaml(text: str, path: str) -> Loaded:
    """The YAML document in ``text``, refused (ConfigError on FILE) past a bound or with a repeated key."""
    loader = _LOADER(text, path)
    try:
        value = loader.get_single_data()
    except ScannerError as exc:
        if exc.problem != "exceeded maximum nesting depth":
            raise
        # libyaml's own flow-level limit (1,000), met while it scans ahead before the composer counts
        raise _refused(path, f"is nested more than {MAX_DEPTH} levels deep", exc.problem_mark.line + 1) from None
    finally:
        loader.dispose()
    return Loaded(value, loader.key_lines)


def load_json(text: str, path: str) -> Loaded:
    """The JSON document in ``text``, refused (ConfigError on FILE) too deep or with a repeated key."""
    _check_json_depth(text, path)
    try:
        return Loaded(json.loads(text, object_pairs_hook=_unique_pairs(path)))
    except RecursionError:  # the depth check counts brackets outside strings; this is json's own limit
        raise _refused(path, f"is nested more than {MAX_DEPTH} levels deep", None) from None


def _refused(path: str, problem: str, line: int | None) -> ConfigError:
    return ConfigError("FILE", f"{path} {problem}" + (f" (line {line})" if line is not None else ""))


def _check_json_depth(text: str, path: str) -> None:
    # Strings removed first: a bracket inside one is text. A JSON string holds no raw newline, so the
    # lines counted in what is left are the file's.
    bare = _JSON_STRING.sub('""', text)
    if bare.count("[") + bare.count("{") <= MAX_DEPTH:
        return
    depth = 0
    for match in _JSON_BRACKET.finditer(bare):
        depth += 1 if match.group() in "[{" else -1
        if depth > MAX_DEPTH:
            line = bare.count("\n", 0, match.start()) + 1
            raise _refused(path, f"is nested more than {MAX_DEPTH} levels deep", line)


def _unique_pairs(path: str) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _refused(path, f"repeats the key {shown(key)} in one object", None)
            seen.add(key)
        return dict(pairs)
    return unique


class _Bounded(Composer, SafeConstructor, Resolver):  # type: ignore[misc]
    """Composer and constructor with the bounds; mixed with a parser below."""

    def __init__(self, path: str) -> None:
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.path = path
        self.key_lines: dict[int, tuple[Any, dict[Any, int]]] = {}
        self._aliases = self._nodes = self._chars = self._depth = self._deepest = 0
        self._extents: dict[Node, _Extent] = {}
        self._own_keys: dict[Node, list[ScalarNode]] = {}

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            self._repeat(event)
            return super().compose_node(parent, index)
        nodes, chars = self._nodes, self._chars
        self._count(event)
        outer_deepest, self._deepest = self._deepest, self._depth
        node: Node = super().compose_node(parent, index)
        if event.anchor is not None:
            self._extents[node] = _Extent(self._nodes - nodes, self._chars - chars, self._deepest - self._depth + 1)
        self._depth -= 1
        self._deepest = max(outer_deepest, self._deepest)
        return node

    def _count(self, event: Event) -> None:
        self._depth += 1
        self._nodes += 1
        if isinstance(event, ScalarEvent):
            self._chars += len(event.value)
        self._check(event, self._depth, "")

    def _repeat(self, event: Event) -> None:
        self._aliases += 1
        if self._aliases > MAX_ALIASES:
            raise self._refused(event, f"uses more than {MAX_ALIASES:,} aliases")
        node = self.anchors.get(event.anchor)
        if node is None:
            return  # the composer names the undefined alias
        extent = self._extents.get(node)
        if extent is None:  # still being composed: the alias is inside the value it names
            raise self._refused(event, f"has an alias *{event.anchor} inside the value it repeats (a recursive value)")
        self._nodes += extent.nodes
        self._chars += extent.chars
        self._deepest = max(self._deepest, self._depth + extent.height)
        self._check(event, self._depth + extent.height, f" through the alias *{event.anchor}")

    def _check(self, event: Event, depth: int, how: str) -> None:
        if depth > MAX_DEPTH:
            raise self._refused(event, f"is nested more than {MAX_DEPTH} levels deep{how}")
        if self._nodes > MAX_NODES:
            raise self._refused(event, f"holds more than {MAX_NODES:,} values{how}")
        if self._chars > MAX_CHARS:
            raise self._refused(event, f"holds more than {MAX_CHARS:,} characters of text{how}")

    def _refused(self, event: Event, problem: str) -> ConfigError:
        return _refused(self.path, problem, event.start_mark.line + 1 if event.start_mark else None)

    def compose_mapping_node(self, anchor: str | None) -> MappingNode:
        node: MappingNode = super().compose_mapping_node(anchor)
        # Noted now: constructing a merge (<<) rewrites the merged node's pairs in place.
        self._own_keys[node] = [key for key, _ in node.value if isinstance(key, ScalarNode) and key.tag != _MERGE]
        return node

    def construct_yaml_map(self, node: MappingNode) -> Any:
        data: dict[Any, Any] = {}
        yield data
        self._refuse_repeated_keys(node)
        data.update(self.construct_mapping(node))  # merged (<<) keys first, then the mapping's own
        lines = {self.construct_object(key): key.start_mark.line + 1
                 for key, _ in node.value if isinstance(key, ScalarNode)}
        self.key_lines[id(data)] = (data, lines)

    def _refuse_repeated_keys(self, node: MappingNode) -> None:
        lines: dict[Any, int] = {}
        for key_node in self._own_keys.get(node, ()):
            key, line = self.construct_object(key_node), key_node.start_mark.line + 1
            if key in lines:
                raise _refused(self.path, f"repeats the key {shown(key)} in one mapping "
                                          f"(lines {lines[key]} and {line})", None)
            lines[key] = line


_Bounded.add_constructor("tag:yaml.org,2002:map", _Bounded.construct_yaml_map)


class PyLoader(Reader, Scanner, Parser, _Bounded):  # type: ignore[misc]
    """The bounded loader on PyYAML's own parser."""

    def __init__(self, text: str, path: str) -> None:
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)
        _Bounded.__init__(self, path)


if _EventParser is not None:
    class CLoader(_Bounded, _EventParser):  # type: ignore[misc, valid-type]
        """The bounded loader on libyaml's parser (its events; composing stays in _Bounded)."""

        def __init__(self, text: str, path: str) -> None:
            _EventParser.__init__(self, text)
            _Bounded.__init__(self, path)

_LOADER: Callable[[str, str], _Bounded] = CLoader if _EventParser is not None else PyLoader
