"""Task files (``hai-scheduler tasks apply`` / ``tasks export``): YAML or JSON, read and written.

A file is ``{"team": ..., "tasks": [...]}`` (or the list alone: team ``default``); a file applies
to one team (docs/teams.md): an entry takes the file's team, and one naming another is refused.
Each entry has the fields of ``TaskDefinition`` a user declares (``FILE_FIELDS``) and is validated
by ``validate_task``, the check every entry point uses. ``${ENV_NAME}`` anywhere in a string is replaced by that
environment variable when the file is read (``$${`` is a literal ``${``); a variable that is not
set is an error naming it. Every problem is a ConfigError naming the task and field
(``tasks.nightly.cron``), found before anything is applied. The file is untrusted: it is read
through ``bounded_load``, which refuses an alias bomb, a deep nest or a key written twice in one
mapping, naming the bound and the line.

``export_tasks`` writes the other way: every value the masking module calls secret (a header
such as ``Authorization``, a ``password`` param, a URL with a password or a token-like path)
becomes a ``${HAI_TASK_<ID>_<PATH>}`` reference, never the value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from scheduler_core.access import DEFAULT_TEAM
from scheduler_core.errors import ConfigError, SchedulerError
from scheduler_core.executors import ExecutorRegistry
from scheduler_core.masking import is_secret_name, mask_url
from scheduler_core.model import DECLARED, TaskDefinition, declared_json, validate_task
from scheduler_core.runtime.bounded_load import MAX_FILE_BYTES, Loaded, load_json, load_yaml
from scheduler_core.validation import check_id, check_team

FILE_FIELDS = tuple(f.name for f in DECLARED)
REQUIRED_FIELDS = tuple(f.name for f in DECLARED if f.required)
_DEFAULTS = {f.name: f.default for f in DECLARED if not f.required}
_REFERENCE = re.compile(r"\$\$\{|\$\{([^}]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHAPES = 'a mapping with "tasks: [...]" or a list of tasks'


@dataclass(frozen=True)
class TaskFile:
    """A task file read and checked: its tasks in file order."""

    path: str
    tasks: tuple[TaskDefinition, ...]
    team: str = DEFAULT_TEAM  # every task of the file is this team's; --prune looks at no other


def read_task_file(path: str, environ: Mapping[str, str], registry: ExecutorRegistry | None = None) -> TaskFile:
    """The file's tasks, each resolved and validated; ConfigError naming the first problem."""
    loaded = _load(path)
    entries, team = _entries(loaded, path)
    registry = registry or ExecutorRegistry()
    seen: dict[str, int] = {}
    found = []
    for index, entry in enumerate(entries):
        where = _where(entry, index)
        task = _task(loaded, entry, where, environ, registry, team)
        if task.id in seen:
            raise ConfigError(where, f"the id appears twice in the file (entries {seen[task.id] + 1} and {index + 1})")
        seen[task.id] = index
        found.append(task)
    return TaskFile(path, tuple(found), team)


def _load(path: str) -> Loaded:
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)  # never more: a huge file (or /dev/zero) is refused, not read
        if len(data) > MAX_FILE_BYTES:
            raise ConfigError("FILE", f"{path} is larger than {MAX_FILE_BYTES} bytes")
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("FILE", f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if path.lower().endswith(".json"):
        try:
            return load_json(text, path)
        except ValueError as exc:
            raise ConfigError("FILE", f"{path} is not JSON: {exc}") from None
    try:
        return load_yaml(text, path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError("FILE", f"{path} is not YAML: {problem}{at}") from None
    except ValueError as exc:  # an integer past Python's digit limit
        raise ConfigError("FILE", f"{path} is not YAML: {exc}") from None


def _entries(loaded: Loaded, path: str) -> tuple[list[Any], str]:
    """The entries and the team the file applies to."""
    value = loaded.value
    if isinstance(value, list):
        return value, DEFAULT_TEAM
    if not isinstance(value, Mapping):
        got = "nothing" if value is None else type(value).__name__
        raise ConfigError("FILE", f"{path} must hold {_SHAPES} (got {got})")
    _refuse_unknown(loaded, value, ("team", "tasks"), "", "task file key", f"the file holds {_SHAPES}")
    if "tasks" not in value:
        raise ConfigError("tasks", f"is required (the file holds {_SHAPES})")
    if not isinstance(value["tasks"], list):
        raise ConfigError("tasks", f"must be a list of tasks (got {type(value['tasks']).__name__})")
    return list(value["tasks"]), check_team(value.get("team", DEFAULT_TEAM), "team")


def _refuse_unknown(loaded: Loaded, mapping: Mapping[Any, Any], known: tuple[str, ...], where: str, what: str,
                    hint: str) -> None:
    """Every key of ``mapping`` not in ``known`` named in one ConfigError, each with its line when known."""
    unknown = [key for key in mapping if key not in known]
    if not unknown:
        return
    lines = [loaded.line(mapping, key) for key in unknown]
    if len(unknown) == 1:
        at = f"line {lines[0]}; " if lines[0] is not None else ""
        raise ConfigError(f"{where}{str(unknown[0])[:40]}", f"is not a {what} ({at}{hint})")
    named = ", ".join(str(key)[:40] + (f" (line {line})" if line is not None else "")
                      for key, line in zip(unknown, lines, strict=True))
    raise ConfigError(where.rstrip(".") or "FILE", f"{named} are not {what}s ({hint})")


def _where(entry: Any, index: int) -> str:
    task_id = entry.get("id") if isinstance(entry, Mapping) else None
    if isinstance(task_id, str) and task_id and len(task_id) <= 128 and task_id.isprintable():
        return f"tasks.{task_id}"
    return f"tasks[{index}]"


def _task(loaded: Loaded, entry: Any, where: str, environ: Mapping[str, str],
          registry: ExecutorRegistry, team: str) -> TaskDefinition:
    if not isinstance(entry, Mapping):
        raise ConfigError(where, f"must be a mapping of task fields (got {type(entry).__name__})")
    _refuse_unknown(loaded, entry, FILE_FIELDS, f"{where}.", "task field", f"the fields: {', '.join(FILE_FIELDS)}")
    for required in REQUIRED_FIELDS:
        if required not in entry:
            raise ConfigError(f"{where}.{required}", "is required")
    values = {str(key): resolve_references(value, f"{where}.{key}", environ) for key, value in entry.items()}
    values.setdefault("team", team)
    try:
        check_id(values["id"], "id", url_path=True)
        task = validate_task(TaskDefinition(**values), registry.validate)
        if task.team != team:
            raise ConfigError("team", f"the file applies to team {team!r} (its top-level team:); a task of "
                                      "another team goes in a file of its own")
        return task
    except ConfigError as exc:
        raise ConfigError(f"{where}.{exc.field}", exc.message.removeprefix(f"{exc.field}: ")) from None
    except SchedulerError as exc:  # InvalidCronError: "cron: ..." -> "tasks.<id>.cron: ..."
        named = re.match(r"[a-z_]+: ", exc.message)
        raise type(exc)(f"{where}.{exc.message}" if named else f"{where}: {exc.message}") from None


def resolve_references(value: Any, where: str, environ: Mapping[str, str]) -> Any:
    """``value`` with every ``${NAME}`` in its strings replaced by the environment's value."""
    if isinstance(value, str):
        return _REFERENCE.sub(lambda match: _lookup(match, where, environ), value)
    if isinstance(value, Mapping):
        return {key: resolve_references(item, f"{where}.{key}", environ) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve_references(item, f"{where}[{index}]", environ) for index, item in enumerate(value)]
    return value


def _lookup(match: re.Match[str], where: str, environ: Mapping[str, str]) -> str:
    if match.group(0) == "$${":
        return "${"
    name = match.group(1)
    if not _ENV_NAME.fullmatch(name):
        raise ConfigError(where, f"${{{name}}} is not an environment variable reference (use ${{NAME}}, "
                                 "or $${ for a literal ${)")
    if name not in environ:
        raise ConfigError(where, f"names the environment variable {name}, which is not set")
    return environ[name]


# --- export ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Export:
    """What ``tasks export`` writes, and the variables it references (name -> the field)."""

    text: str
    references: dict[str, str]


def export_tasks(stored: list[TaskDefinition], as_json: bool = False, team: str = DEFAULT_TEAM) -> Export:
    """``team``'s definitions as a task file, secrets as ``${...}`` references (never their values)."""
    references: dict[str, str] = {}
    entries = [_exported(task, references) for task in sorted(stored, key=lambda t: t.id) if task.team == team]
    for entry in entries:
        entry.pop("team", None)  # the file's, written once at the top
    document = {"team": team, "tasks": entries} if team != DEFAULT_TEAM else {"tasks": entries}
    if as_json:
        return Export(json.dumps(document, indent=2, ensure_ascii=False) + "\n", references)
    return Export(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), references)


def _exported(task: TaskDefinition, references: dict[str, str]) -> dict[str, Any]:
    data = {name: value for name, value in declared_json(task).items()
            if name in REQUIRED_FIELDS or value != _json_default(name)}

    def leaf(value: Any, path: str, secret: bool) -> Any:
        return _reference(task.id, value, path, secret, references)

    for name in ("handler", "params"):
        if name in data:
            data[name] = _walk(data[name], name, False, leaf)
    for name in ("name", "description"):
        if isinstance(data.get(name), str):
            data[name] = str(data[name]).replace("${", "$${")
    return data


def _json_default(name: str) -> Any:
    default = _DEFAULTS[name]
    return default.to_json() if hasattr(default, "to_json") else default


def _walk(value: Any, path: str, secret: bool, leaf: Callable[[Any, str, bool], Any]) -> Any:
    if isinstance(value, Mapping):
        return {key: _walk(item, f"{path}.{key}", secret or (isinstance(key, str) and is_secret_name(key)), leaf)
                for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(item, f"{path}[{index}]", secret, leaf) for index, item in enumerate(value)]
    return leaf(value, path, secret)


def _reference(task_id: str, value: Any, path: str, secret: bool, references: dict[str, str]) -> Any:
    """A secret scalar (or a URL carrying a credential) as a reference; other strings escaped."""
    if not isinstance(value, str):
        secret = secret and value is not None and not isinstance(value, bool)
    elif "://" in value and mask_url(value) != value:
        secret = True
    if not secret:
        return value.replace("${", "$${") if isinstance(value, str) else value
    name = re.sub(r"[^A-Z0-9]+", "_", f"HAI_TASK_{task_id}_{path}".upper()).strip("_")
    while name in references and references[name] != f"tasks.{task_id}.{path}":
        name += "_"
    references[name] = f"tasks.{task_id}.{path}"
    return f"${{{name}}}"

