"""The create / edit form of api and hook tasks: text fields in, a definition out.

The form only turns text into values (numbers, JSON, header lines) and names the field
when it cannot; every rule about what a task may be is the core's (``validate_task`` and
the executors' ``validate``, reached through ``Scheduler.register`` / ``update_task``),
whose ConfigError.field is mapped back onto the form field here.

Secrets: the form shows definitions masked (``task.masked()``) and never sends a stored
secret to the browser. A masked value sent back means "keep the stored one"
(``restore_masked``). A form re-rendered after an error shows exactly what was posted in that
request, so the operator never types a secret twice; ``values`` only ever hold a stored
definition masked or the text just posted, never a stored secret restored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from scheduler_core.cron import validate_timezone
from scheduler_core.errors import ConfigError, InvalidCronError, SchedulerError, TaskAlreadyExistsError
from scheduler_core.executors.http import METHODS
from scheduler_core.masking import restore_masked
from scheduler_core.model import DECLARED, TaskDefinition
from scheduler_core.task_policies import Calendar, CatchupMode, CatchupPolicy, OverlapMode, OverlapPolicy, RetryPolicy
from scheduler_core.task_schema import DeclaredField, Section, Widget
from webapp.forms import whole_number
from webapp.timefmt import wall_ms

FORM_KINDS = ("api", "hook")
CODE_KINDS = ("python", "js", "command")  # run code or a program with the node's privileges
CODE_REFUSED = ("The dashboard never accepts code or commands: python, js and command tasks run with the node's "
                "privileges, so they are defined in the application or a task file, not here. Choose api or hook.")
# The form fields a widget shows (a simple widget: one field named as the task field), and the core
# field paths whose errors they show (a dotted path's first one or two parts).
_WIDGET_FIELDS: dict[Widget, dict[str, str]] = {
    Widget.RETRY: {"retry.max_attempts": "retry_max_attempts", "retry": "retry_backoff"},
    Widget.CATCHUP: {"catchup.policy": "catchup_policy", "catchup.window_ms": "catchup_window_ms",
                     "catchup": "catchup_policy"},
    Widget.OVERLAP: {"overlap.policy": "overlap_policy", "overlap.buffer_limit": "overlap_buffer_limit",
                     "overlap": "overlap_policy"},
    Widget.CALENDAR: {"calendar.active_from_ms": "calendar_from", "calendar.active_until_ms": "calendar_until",
                      "calendar.exclude": "calendar_exclude", "calendar": "calendar_exclude"},
    Widget.HANDLER: {"handler.url": "url", "handler.method": "method", "handler.headers": "headers",
                     "handler.body": "body", "handler.timeout": "timeout", "handler.kind": "kind", "handler": "kind"},
}
_FIELD_OF: dict[str, str] = {}
for _declared in DECLARED:
    _FIELD_OF.update(_WIDGET_FIELDS.get(_declared.spec.widget, {_declared.name: _declared.name}))
CHECKBOXES = tuple(f.name for f in DECLARED if f.spec.widget is Widget.CHECK)
TEXT_FIELDS = tuple(dict.fromkeys(shown for shown in _FIELD_OF.values() if shown not in CHECKBOXES))
SECTIONS = tuple((section, tuple(f for f in DECLARED if f.spec.section is section))
                 for section in Section if section is not Section.STORED)
CATCHUP_POLICIES = tuple(str(mode) for mode in CatchupMode)
OVERLAP_POLICIES = tuple(str(mode) for mode in OverlapMode)


def form_field(core_field: str) -> str:
    """The form field that shows an error about ``core_field`` (``handler.headers.X`` -> headers)."""
    for length in (2, 1):
        prefix = ".".join(core_field.replace("[", ".").split(".")[:length])
        if prefix in _FIELD_OF:
            return _FIELD_OF[prefix]
    return "form"


def error_text(exc: SchedulerError) -> str:
    """The message to show next to the field: without the path the field already names."""
    message = exc.message
    core_field = getattr(exc, "field", None)
    if isinstance(exc, InvalidCronError):
        return cron_error(message)
    if core_field is None:
        return message
    shown = _FIELD_OF.get(core_field)
    if shown is not None:  # the path is exactly the form field: drop it
        return message.removeprefix(f"{core_field}: ")
    return message.removeprefix("handler.").removeprefix("retry.")


def cron_error(message: str) -> str:
    """A cron error as the form shows it, naming the field as its label does."""
    return "Cron expression: " + message.removeprefix("cron: ")


@dataclass
class TaskForm:
    """What the form shows (a stored task masked, or what was just posted) and the errors next to its fields."""

    values: dict[str, str]
    checks: dict[str, bool]
    errors: dict[str, str] = field(default_factory=dict)

    # --- building -------------------------------------------------------------------------

    @classmethod
    def blank(cls) -> TaskForm:
        """A new task's form: every field at its declared default."""
        values = dict.fromkeys(TEXT_FIELDS, "")
        checks = {}
        for declared in DECLARED:
            if declared.spec.widget is Widget.CHECK:
                checks[declared.name] = bool(declared.default)
            elif not declared.required and isinstance(declared.default, str):
                values[declared.name] = declared.default
        values.update(kind="api", method="POST", retry_max_attempts="1",
                      catchup_policy=str(CatchupPolicy().policy), catchup_window_ms=str(CatchupPolicy().window_ms),
                      overlap_policy=str(OverlapPolicy().policy),
                      overlap_buffer_limit=str(OverlapPolicy().buffer_limit))
        return cls(values, checks)

    @classmethod
    def from_task(cls, task: TaskDefinition) -> TaskForm:
        """The stored definition as the form shows it: secrets masked."""
        masked = task.masked()
        values = dict.fromkeys(TEXT_FIELDS, "")
        checks = {}
        for declared in DECLARED:
            widget, value = declared.spec.widget, masked[declared.name]
            if widget is Widget.CHECK:
                checks[declared.name] = bool(value)
            elif widget is Widget.JSON:
                values[declared.name] = _json_text(value)
            elif widget in _WIDGET_FIELDS:
                continue
            else:
                values[declared.name] = "" if value is None else str(value)
        handler: Mapping[str, Any] = masked["handler"] or {}
        retry = masked["retry"] or {}
        catchup, overlap = task.catchup_policy, task.overlap_policy
        calendar = task.calendar or Calendar()
        zone = _zone(task.timezone)
        values.update(
            calendar_from=_local_text(calendar.active_from_ms, zone),
            calendar_until=_local_text(calendar.active_until_ms, zone),
            calendar_exclude="\n".join(calendar.exclude))
        values.update(
            retry_max_attempts=str(retry.get("max_attempts", 1)),
            retry_backoff=", ".join(str(ms) for ms in retry.get("backoff_ms", [])),
            catchup_policy=str(catchup.policy), catchup_window_ms=str(catchup.window_ms),
            overlap_policy=str(overlap.policy), overlap_buffer_limit=str(overlap.buffer_limit),
            kind=task.handler_kind, url=str(handler.get("url", "")),
            method=str(handler.get("method", "POST")), headers=_header_lines(handler.get("headers") or {}),
            body=_json_text(handler.get("body")), timeout=str(handler.get("timeout", "")))
        return cls(values, checks)

    @classmethod
    def from_request(cls, form: Mapping[str, str]) -> TaskForm:
        values = {name: str(form.get(name, "")) for name in TEXT_FIELDS}
        values["kind"] = values["kind"].strip().lower()
        return cls(values, {name: name in form for name in CHECKBOXES})

    def fail(self, exc: SchedulerError) -> None:
        """Show a core error next to the field it names."""
        if isinstance(exc, TaskAlreadyExistsError):
            self.errors["id"] = "A task with this id already exists."
        elif isinstance(exc, InvalidCronError):
            self.errors["cron"] = error_text(exc)
        else:
            self.errors.setdefault(form_field(getattr(exc, "field", "") or ""), error_text(exc))

    # --- reading ----------------------------------------------------------------------------

    def definition(self, stored: TaskDefinition | None) -> TaskDefinition | None:
        """The task the form describes (``stored``: the task being edited), or None with
        ``errors`` filled. Masked values are restored from ``stored``."""
        for name, value in self.values.items():
            if "\x00" in value:  # no database stores it faithfully
                self.errors[name] = "Remove the NUL character."
        kind = self.values["kind"]
        if kind in CODE_KINDS:
            self.errors["kind"] = CODE_REFUSED
        elif kind not in FORM_KINDS:
            self.errors["kind"] = "Choose api or hook."
        declared = {f.name: self._value(f, stored) for f in DECLARED}
        if self.errors:
            return None
        return TaskDefinition(**declared)

    def _value(self, declared: DeclaredField, stored: TaskDefinition | None) -> Any:
        """The field's value as typed (a secret's mask restored from ``stored``); errors collected."""
        name, widget = declared.name, declared.spec.widget
        text = self.values.get(name, "")
        if widget is Widget.ID:
            return text.strip() if stored is None else stored.id
        if widget is Widget.CHECK:
            return self.checks[name]
        if widget is Widget.CRON:
            return text
        if widget in (Widget.TEXT, Widget.GROUP):
            return text.strip() or None
        if widget is Widget.TEAM:  # a select; left out (an old page): its team, or the default one
            return text.strip() or (stored.team if stored is not None else declared.default)
        if widget is Widget.COUNT:  # empty: none; the core checks the range
            number = whole_number(text.strip()) if text.strip() else None
            if text.strip() and number is None:
                self.errors[name] = f"{text.strip()[:40]!r} is not a whole number."
            return number
        if widget is Widget.RETRY:
            return self._retry()
        if widget is Widget.CATCHUP:
            return self._policy(CatchupPolicy, "catchup", "window_ms", stored,
                                "is not a number of milliseconds (e.g. 3600000 = 1 h)")
        if widget is Widget.OVERLAP:
            return self._policy(OverlapPolicy, "overlap", "buffer_limit", stored, "is not a whole number")
        if widget is Widget.CALENDAR:
            return self._calendar()
        if widget is Widget.HANDLER:
            value = self._handler(stored) if self.values["kind"] in FORM_KINDS else None
        elif widget is Widget.JSON:
            value = self._json(name)
        else:  # LINE, ZONE: an optional one (None by default) left blank is None
            return text.strip() or (None if declared.default is None else "")
        if declared.spec.secret and (widget is Widget.JSON or self.values["kind"] == "api"):
            try:
                value = restore_masked(value, getattr(stored, name) if stored else None, name)
            except ConfigError as exc:
                self.fail(exc)
        return value

    def _policy(self, cls: Any, name: str, number: str, stored: TaskDefinition | None, not_number: str) -> Any:
        """A policy typed as a choice (``<name>_policy``) and a number (``<name>_<number>``). Left
        at its defaults on a task that has none stored: none (the default behaviour, nothing stored)."""
        default = cls()
        policy = self.values[f"{name}_policy"].strip() or str(default.policy)
        text = self.values[f"{name}_{number}"].strip()
        value = whole_number(text) if text else getattr(default, number)
        if value is None:
            self.errors[f"{name}_{number}"] = f"{text[:40]!r} {not_number}."
            return None
        if getattr(stored, name, None) is None and policy == default.policy and value == getattr(default, number):
            return None
        try:
            return cls.parse({"policy": policy, number: value})
        except ConfigError as exc:  # the core's message, next to its field
            self.fail(exc)
            return None

    def typed_calendar(self) -> tuple[Calendar | None, bool]:
        """The calendar as typed so far, for the live preview: (it or None, whether it has errors)."""
        calendar = self._calendar()
        return calendar, any(name.startswith("calendar") for name in self.errors)

    def _calendar(self) -> Calendar | None:
        """The window's ends are typed as wall times in the task's zone (the one typed on this form);
        the exclusions one per line. All left empty: no calendar."""
        zone = _zone(self.values.get("timezone", ""))
        start, end = self._wall_time("calendar_from", zone), self._wall_time("calendar_until", zone)
        lines = [(number, line.strip()) for number, line in enumerate(self.values["calendar_exclude"].splitlines(), 1)
                 if line.strip()]
        if "calendar_from" in self.errors or "calendar_until" in self.errors:
            return None
        if start is None and end is None and not lines:
            return None
        try:
            return Calendar(start, end, tuple(line for _, line in lines))
        except ConfigError as exc:
            item = re.fullmatch(r"calendar\.exclude\[([0-9]+)\]", exc.field or "")
            if item is not None and int(item[1]) < len(lines):
                said = exc.message.removeprefix(f"{exc.field}: ")
                self.errors["calendar_exclude"] = f"Line {lines[int(item[1])][0]}: {said}"
            else:
                self.fail(exc)
            return None

    def _wall_time(self, name: str, zone: ZoneInfo) -> int | None:
        text = self.values[name].strip()
        if not text:
            return None
        try:
            return wall_ms(text, zone)
        except (ValueError, OverflowError):
            self.errors[name] = "Not a date and time; pick one, or type it as 2027-01-01T00:00."
            return None

    def _retry(self) -> RetryPolicy | None:
        text = self.values["retry_max_attempts"].strip() or "1"
        attempts = _integer(text)
        if attempts is None:
            self.errors["retry_max_attempts"] = "Enter a whole number (1 = no retry)."
        delays: list[int] = []
        for part in self.values["retry_backoff"].replace(",", " ").split():
            delay = _integer(part)
            if delay is None:
                self.errors["retry_backoff"] = f"{part!r} is not a number of milliseconds (e.g. 1000, 5000)."
                break
            delays.append(delay)
        if attempts is None or (attempts == 1 and not delays):
            return None
        try:
            return RetryPolicy(max_attempts=attempts, backoff_ms=tuple(delays))
        except ConfigError as exc:  # out of range: the core's message, next to its field
            self.fail(exc)
            return None

    def _json(self, name: str) -> Any:
        text = self.values[name].strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError as exc:
            self.errors[name] = f"Not valid JSON: {exc}."
            return None

    def _handler(self, stored: TaskDefinition | None) -> dict[str, Any] | None:
        if self.values["kind"] == "hook":
            # Keep a stored hook handler as it is (None and {"kind": "hook"} both mean the host's hook).
            return dict(stored.handler) if stored and stored.handler_kind == "hook" and stored.handler else None
        values = self.values
        handler: dict[str, Any] = {"kind": "api", "url": values["url"].strip(), "method": values["method"].strip(),
                                   "headers": self._headers()}
        body = self._json("body")
        if body is not None:
            handler["body"] = body
        if values["timeout"].strip():
            timeout = _integer(values["timeout"].strip())
            if timeout is None:
                self.errors["timeout"] = "Enter the timeout in whole milliseconds (e.g. 30000)."
            handler["timeout"] = timeout
        previous = stored.handler if stored is not None and stored.handler_kind == "api" else None
        if previous and "max_response_bytes" in previous:  # not on the form: kept as stored
            handler["max_response_bytes"] = previous["max_response_bytes"]
        return handler

    def _headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for number, line in enumerate(self.values["headers"].splitlines(), 1):
            if not line.strip():
                continue
            name, colon, value = line.partition(":")
            if not colon or not name.strip():
                self.errors["headers"] = f"Line {number}: write one header per line as 'Name: value'."
                break
            if name.strip() in headers:
                self.errors["headers"] = f"{name.strip()}: is given twice."
                break
            headers[name.strip()] = value.strip()
        return headers


def _zone(name: str) -> ZoneInfo:
    """The zone a task's wall times are typed in: its own, UTC while the one typed is not a zone
    (that field shows its own error)."""
    try:
        return ZoneInfo(validate_timezone(name.strip() or "UTC"))
    except ConfigError:
        return ZoneInfo("UTC")


def _local_text(ms: int | None, zone: ZoneInfo) -> str:
    """A ``datetime-local`` value for ``ms`` in ``zone``: to the minute, or to the millisecond
    when it has any (so saving the form unchanged keeps the stored instant)."""
    if ms is None:
        return ""
    moment = datetime.fromtimestamp(ms / 1000, zone)
    if ms % 60_000 == 0:
        return moment.strftime("%Y-%m-%dT%H:%M")
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def _integer(text: str) -> int | None:
    """ASCII digits only, as every other number on the dashboard's forms (``int()`` would also
    take "+5", "1_000" and "٣")."""
    return whole_number(text)


def _json_text(value: Any) -> str:
    return "" if value is None else json.dumps(value, indent=2, ensure_ascii=False)


def _header_lines(headers: Mapping[str, Any]) -> str:
    return "\n".join(f"{name}: {value}" for name, value in headers.items())


__all__ = [
    "CATCHUP_POLICIES",
    "CODE_KINDS",
    "CODE_REFUSED",
    "FORM_KINDS",
    "METHODS",
    "OVERLAP_POLICIES",
    "SECTIONS",
    "TaskForm",
    "cron_error",
    "error_text",
    "form_field",
]
