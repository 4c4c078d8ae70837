"""The task pages' operator API: ``scheduler.task_ops``.

Search (``status:failed kind:api enabled:false tz:Europe/Berlin nightly``), the task list
with last outcomes and next run times, a task's history, cron previews, deletion with a
compare-and-set, and the round trip of masked secrets through an edit form. Every bad input
raises :class:`ConfigError` naming the field (or the search term) before anything is read
or written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scheduler_core.cron import describe, next_fire_ms, upcoming, validate_cron, validate_timezone
from scheduler_core.errors import ConfigError, ConflictError, TaskNotFoundError
from scheduler_core.model import ID_MAX, Execution, TaskDefinition
from scheduler_core.runtime.operations import EXECUTION_STATUSES
from scheduler_core.secrets import MASK, is_secret_name, mask_values
from scheduler_core.store.task_queries import NEVER_RUN, StoredTask, TaskFilter, TaskQueries

if TYPE_CHECKING:
    from scheduler_core.runtime.scheduler import Scheduler

SEARCH_FIELDS = ("status", "kind", "enabled", "tz")
_FIELD_ALIASES = {"timezone": "tz"}
SEARCH_STATUSES = (*EXECUTION_STATUSES, NEVER_RUN)
MAX_QUERY = 500
MAX_PAGE = 100
PREVIEW_RUNS = 5
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")
# A term is field:value (the value may be quoted), a quoted phrase, or a bare word.
_TERM = re.compile(r'([A-Za-z_]+):(?:"([^"]*)"|(\S*))|"([^"]*)"|(\S+)')


@dataclass(frozen=True)
class TaskRow:
    """One line of the task list."""

    id: str
    task: TaskDefinition | None  # None: the stored definition is unreadable (see problem)
    problem: str | None
    last: Execution | None  # the newest journal row, None if it never ran
    next_run_ms: int | None  # the next fire minute (DB clock), None when disabled or unreadable


@dataclass(frozen=True)
class TaskPage:
    rows: list[TaskRow]
    search: TaskFilter
    next_after: str | None  # cursor of the following page
    prev_before: str | None  # cursor of the preceding page
    now_ms: int  # the DB clock the next run times were computed from


@dataclass(frozen=True)
class OccurrencePage:
    rows: list[Execution]
    next_before: str | None  # cursor ("created_at.occurrence_id") of the older page
    any_running: bool


@dataclass(frozen=True)
class CronPreview:
    cron: str  # normalised
    timezone: str
    description: str
    runs: list[int]  # the next fire minutes, UTC ms


def parse_search(query: str | None) -> TaskFilter:
    """``status:failed kind:api enabled:false tz:Europe/Berlin nightly`` as a filter.

    Raises ConfigError(field="q") naming the offending term: an unknown field, a bad value,
    a field given twice. Free words (and quoted phrases) must all occur in id, name or
    description.
    """
    text = (query or "").strip()
    if "\x00" in text:
        raise ConfigError("q", "must not contain NUL characters")
    if len(text) > MAX_QUERY:
        raise ConfigError("q", f"the search is longer than {MAX_QUERY} characters")
    if text.count('"') % 2:
        raise ConfigError("q", "a quote (\") is not closed")
    terms: dict[str, str] = {}
    words: list[str] = []
    for match in _TERM.finditer(text):
        name, quoted, bare, phrase, word = match.groups()
        if name is None:
            value = phrase if phrase is not None else word
            if value.strip():
                words.append(value.strip())
            continue
        field = _FIELD_ALIASES.get(name.lower(), name.lower())
        if field not in SEARCH_FIELDS:
            raise ConfigError("q", f"unknown search field {name!r}: use {', '.join(f + ':' for f in SEARCH_FIELDS)} "
                                   "or plain words")
        if field in terms:
            raise ConfigError("q", f"{field}: is given twice")
        terms[field] = quoted if quoted is not None else bare
    return _filter(terms, tuple(words))


def _filter(terms: Mapping[str, str], words: tuple[str, ...]) -> TaskFilter:
    status = terms.get("status")
    if status is not None and status.lower() not in SEARCH_STATUSES:
        raise ConfigError("q", f"status: must be one of {', '.join(SEARCH_STATUSES)} (got {status!r})")
    enabled: bool | None = None
    if "enabled" in terms:
        value = terms["enabled"].lower()
        if value not in _TRUE + _FALSE:
            raise ConfigError("q", f"enabled: must be true or false (got {terms['enabled']!r})")
        enabled = value in _TRUE
    timezone = None
    if "tz" in terms:
        try:
            timezone = validate_timezone(terms["tz"]) if terms["tz"] else None
        except ConfigError as exc:
            raise ConfigError("q", f"tz: {_reason(exc)}") from None
        if timezone is None:
            raise ConfigError("q", "tz: give a time zone name, e.g. tz:Europe/Berlin")
    kind = terms.get("kind")
    return TaskFilter(words=words, status=status.lower() if status else None,
                      kind=kind.lower() if kind is not None else None, enabled=enabled, timezone=timezone)


def _reason(exc: ConfigError) -> str:
    """The message of a ConfigError without its ``field: `` prefix."""
    return exc.message.removeprefix(f"{exc.field}: ")


def _check_limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ConfigError("limit", f"must be an integer between 1 and {MAX_PAGE} (got {limit!r})")
    return limit


def _check_task_id(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value or len(value) > ID_MAX or "\x00" in value:
        raise ConfigError(field, f"must be a task id of 1..{ID_MAX} characters without NUL")
    return value


def parse_occurrence_cursor(cursor: str | None) -> tuple[int, str] | None:
    """``"<created_at>.<occurrence_id>"`` -> (created_at, occurrence_id); None for no cursor."""
    if not cursor:
        return None
    created, _, occurrence = cursor.partition(".")
    if not created.isdigit() or not occurrence or len(occurrence) > 64 or len(created) > 16 or "\x00" in occurrence:
        raise ConfigError("before", "is not a page cursor of this list; start from the newest page")
    return int(created), occurrence


class TaskOperations:
    """Reads for the task pages and the few writes that need more than ``Scheduler``'s API."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def _queries(self) -> TaskQueries:
        return TaskQueries(self._scheduler.context().tasks.engine)

    def now_ms(self) -> int:
        """The database clock (one cheap statement)."""
        return self._scheduler.context().tasks.tick_snapshot().now_ms

    # --- reads ------------------------------------------------------------------------

    def search(self, query: str | None = None, limit: int = 50, after: str | None = None,
               before: str | None = None) -> TaskPage:
        """One page of tasks matching ``query`` with their last outcome and next run time.

        Three statements whatever the page: the DB clock, the page of tasks, and the last
        journal row of exactly those tasks.
        """
        search = parse_search(query)
        if search.kind is not None and self._scheduler.context().executors.get(search.kind) is None:
            raise ConfigError("q", f"kind: no handler kind {search.kind!r} (e.g. kind:api, kind:hook)")
        limit = _check_limit(limit)
        if after is not None:
            _check_task_id(after, "after")
        if before is not None:
            _check_task_id(before, "before")
        queries = self._queries()
        now = self.now_ms()
        found = queries.search(search, limit + 1, after=None if before else after, before=before)
        more = len(found) > limit
        page = (found[1:] if before is not None else found[:limit]) if more else found
        last = queries.last_executions([stored.id for stored in page])
        rows = [self._row(stored, last.get(stored.id), now) for stored in page]
        forward = before is None
        next_after = rows[-1].id if rows and (more or not forward) else None
        prev_before = rows[0].id if rows and ((forward and after is not None) or (not forward and more)) else None
        return TaskPage(rows, search, next_after, prev_before, now)

    @staticmethod
    def _row(stored: StoredTask, last: Execution | None, now: int) -> TaskRow:
        task = stored.task
        next_run = next_fire_ms(task.cron, task.timezone, now) if task is not None and task.enabled else None
        return TaskRow(stored.id, task, stored.problem, last, next_run)

    def get(self, task_id: str) -> TaskDefinition:
        """The stored definition (not the snapshot: an edit form must carry the current version)."""
        _check_task_id(task_id, "task_id")
        task = self._scheduler.context().tasks.get(task_id)
        if task is None:
            raise TaskNotFoundError(f"task {task_id!r} not found", task_id=task_id)
        return task

    def occurrences(self, task_id: str, limit: int = 50, before: str | None = None) -> OccurrencePage:
        """A task's journal rows, newest first, one keyset page after the cursor ``before``."""
        _check_task_id(task_id, "task_id")
        limit = _check_limit(limit)
        cursor = parse_occurrence_cursor(before)
        found = self._queries().occurrences(task_id, limit + 1, cursor)
        rows = found[:limit]
        last = rows[-1] if rows else None
        next_before = f"{last.created_at}.{last.occurrence_id}" if last is not None and len(found) > limit else None
        return OccurrencePage(rows, next_before, any(row.status == "running" for row in rows))

    def next_runs(self, task: TaskDefinition, count: int = PREVIEW_RUNS) -> list[int]:
        """The task's next fire minutes from the DB clock ([] when disabled)."""
        if not task.enabled:
            return []
        return upcoming(task.cron, task.timezone, self.now_ms(), count)

    def preview(self, cron: str, timezone: str | None) -> CronPreview:
        """What a schedule being typed means: its description and next run times.

        Raises InvalidCronError (cron) or ConfigError("timezone") like registering would.
        """
        expr = validate_cron(cron)
        zone = validate_timezone(timezone)
        return CronPreview(expr, zone, describe(expr), upcoming(expr, zone, self.now_ms(), PREVIEW_RUNS))

    # --- writes ----------------------------------------------------------------------------

    def delete(self, task_id: str, expected_updated_at: int | None) -> TaskDefinition:
        """Delete a task if it is still the version the operator saw (compare-and-set).

        Same effects as ``Scheduler.unregister``: the slot goes with it when free, running
        executions of the task are cancelled as ``deleted``. Returns the deleted definition;
        ConflictError when it changed (nothing deleted).
        """
        if isinstance(expected_updated_at, bool) or not isinstance(expected_updated_at, int):
            raise ConfigError("expected_updated_at", "must be the task's updated_at; reload the page")
        ctx = self._scheduler.context()
        current = self.get(task_id)
        if current.updated_at != expected_updated_at:
            raise ConflictError(f"task {task_id!r} changed since it was read (updated_at {current.updated_at})",
                                task_id=task_id)
        if not ctx.tasks.delete(task_id, revision=current.revision):
            raise ConflictError(f"task {task_id!r} changed concurrently; read it again", task_id=task_id)
        ctx.forget_task(task_id)
        for runner in ctx.runners():
            if runner.owned.execution.task_id == task_id:
                runner.signal.cancel("deleted")
        return current


# --- masked secrets through an edit form ------------------------------------------------


def restore_masked(submitted: Any, stored: Any, field: str) -> Any:
    """``submitted`` with masked values put back from ``stored``.

    A form shows definitions masked (``task.masked()``): a secret-named entry reads ``***``
    and a URL's password ``user:***@``. Sent back unchanged, they mean "keep the stored
    value". A masked value with nothing stored to keep is refused, naming its path, so the
    mask itself is never stored as a secret. Header-like names match in any case.
    """
    if isinstance(submitted, Mapping):
        stored_map = stored if isinstance(stored, Mapping) else {}
        return {key: _restore_entry(key, value, stored_map, f"{field}.{key}") for key, value in submitted.items()}
    if isinstance(submitted, list):
        stored_list = stored if isinstance(stored, list | tuple) else []
        return [restore_masked(item, stored_list[index] if index < len(stored_list) else None, f"{field}[{index}]")
                for index, item in enumerate(submitted)]
    if isinstance(submitted, str) and "://" in submitted:
        if isinstance(stored, str) and stored != submitted and mask_values(stored) == submitted:
            return stored
        if _has_masked_password(submitted):
            raise ConfigError(field, "holds a masked password (***): type the password again")
    return submitted


def _restore_entry(key: Any, value: Any, stored: Mapping[str, Any], path: str) -> Any:
    match = _stored_key(key, stored)
    if isinstance(key, str) and is_secret_name(key) and value == MASK:
        if match is None:
            raise ConfigError(path, "is masked (***): type the value again")
        return stored[match]
    return restore_masked(value, stored[match] if match is not None else None, path)


def _stored_key(key: Any, stored: Mapping[str, Any]) -> str | None:
    if key in stored:
        return str(key)
    if isinstance(key, str):
        return next((k for k in stored if isinstance(k, str) and k.lower() == key.lower()), None)
    return None


def _has_masked_password(url: str) -> bool:
    try:
        return urlsplit(url).password == MASK
    except ValueError:
        return False
