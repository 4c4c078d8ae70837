"""``hai-scheduler tasks``: tasks as code (README, "Tasks as code").

  tasks apply FILE [--prune] [--dry-run] [--source NAME]   make the database match a YAML / JSON file
  tasks export [FILE] [--team T]                          write a team's tasks as a file (secrets as ${ENV})
  tasks list                                              the tasks, one line each
  tasks trigger ID [--idempotency-key KEY]                run a task now on a live node
  tasks backfill ID --from T --to T [--tz ZONE] [--reason TEXT] [--dry-run]
                                                          run a task's past fire times in a range

Errors print one line, ``error: <code> <field>: <message>``, and exit 1 (scheduler_core/cli.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from scheduler_core.access import DEFAULT_TEAM
from scheduler_core.config import SchedulerConfig
from scheduler_core.cron import validate_timezone
from scheduler_core.db import close_engine, create_engine
from scheduler_core.errors import ConfigError
from scheduler_core.runtime.backfill import BackfillResult, iso
from scheduler_core.runtime.scheduler import Scheduler
from scheduler_core.runtime.task_apply import apply_step, plan
from scheduler_core.runtime.task_files import export_tasks, read_task_file
from scheduler_core.settings import Settings
from scheduler_core.statuses import ExecutionStatus
from scheduler_core.store.task_files import TaskFileRepository
from scheduler_core.validation import check_id, check_ms, check_team


def add_task_commands(commands: Any) -> None:
    tasks = commands.add_parser("tasks", help="tasks as code: apply, export, list, trigger")
    sub = tasks.add_subparsers(title="tasks commands")
    apply = sub.add_parser("apply", help="make the database's tasks match a YAML or JSON file (prints the diff)")
    apply.add_argument("file", metavar="FILE")
    apply.add_argument("--prune", action="store_true",
                       help="delete tasks this file created earlier and no longer lists (never other tasks)")
    apply.add_argument("--dry-run", action="store_true", help="print the diff, change nothing")
    apply.add_argument("--source", metavar="NAME", help="the name tasks created by this file are marked with "
                                                        "(default: the file name without its extension)")
    apply.set_defaults(handler=_apply)
    export = sub.add_parser("export", help="write every task as a task file; secrets as ${ENV_NAME} references")
    export.add_argument("file", metavar="FILE", nargs="?", help="default: standard output (YAML)")
    export.add_argument("--team", metavar="TEAM", default=DEFAULT_TEAM,
                        help=f"whose tasks the file holds (a file applies to one team; default {DEFAULT_TEAM})")
    export.set_defaults(handler=_export)
    listing = sub.add_parser("list", help="the stored tasks, one line each")
    listing.set_defaults(handler=_list)
    trigger = sub.add_parser("trigger", help="run a task now: queued for a live node that can run it")
    trigger.add_argument("task_id", metavar="ID")
    trigger.add_argument("--idempotency-key", metavar="KEY", help="the same key again returns the same occurrence")
    trigger.set_defaults(handler=_trigger)
    backfill = sub.add_parser("backfill", help="run a task's past fire times in a range, each once, one at a time "
                                               "(minutes that ran are left alone)")
    backfill.add_argument("task_id", metavar="ID")
    backfill.add_argument("--from", dest="start", metavar="TIME", required=True,
                          help="the range's first minute: ISO 8601 (2026-12-01T00:00, 2026-12-01T00:00+01:00, "
                               "...Z) or unix ms")
    backfill.add_argument("--to", dest="end", metavar="TIME", required=True, help="its last minute, included")
    backfill.add_argument("--tz", metavar="ZONE", help="the zone of times written without an offset (default: the "
                                                       "task's time zone)")
    backfill.add_argument("--reason", metavar="TEXT", help="why: written to the audit trail")
    backfill.add_argument("--dry-run", action="store_true", help="say what the range holds, queue nothing")
    backfill.set_defaults(handler=_backfill)
    for parser in (apply, export, listing, trigger, backfill):
        parser.add_argument("--database-url", help="overrides HAI_DATABASE_URL")


@contextmanager
def _scheduler(settings: Settings, **options: Any) -> Iterator[Scheduler]:
    """A scheduler on the database that runs nothing itself (no tick, one handler thread)."""
    engine = create_engine(settings.database)
    scheduler = Scheduler(engine, SchedulerConfig(max_concurrency=1), **options)
    try:
        scheduler.init()
        yield scheduler
    finally:
        scheduler.close()
        close_engine(engine)


def _apply(args: argparse.Namespace, settings: Settings) -> int:
    source = check_id(args.source if args.source is not None else Path(args.file).stem,
                      "--source" if args.source is not None else "FILE")
    task_file = read_task_file(args.file, os.environ)  # every task checked before anything is read or written
    with _scheduler(settings) as scheduler:
        wanted = plan(scheduler, task_file, source, args.prune)
        print(f"tasks file {args.file} (source {source!r}{', prune' if args.prune else ''})")
        for step in wanted.steps:
            for line in step.lines():
                print(line)
        if args.dry_run or not wanted.changes:
            print(wanted.summary() + (" (dry run: nothing applied)" if args.dry_run and wanted.changes else ""))
            return 0
        for done, step in enumerate(wanted.changes):
            try:
                apply_step(scheduler, step, source)
            except Exception:
                print(f"applied {done} of {len(wanted.changes)} changes; {step.task_id} failed:", file=sys.stderr)
                raise
    print("applied: " + wanted.summary())
    return 0


def _export(args: argparse.Namespace, settings: Settings) -> int:
    with _scheduler(settings) as scheduler:
        stored = list(scheduler.refresh_tasks())
    as_json = bool(args.file) and str(args.file).lower().endswith(".json")
    team = check_team(args.team, "--team")
    exported = export_tasks(stored, as_json, team)
    others = sorted({task.team for task in stored if task.team != team})
    stored = [task for task in stored if task.team == team]
    if args.file:
        try:
            Path(args.file).write_text(exported.text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError("FILE", f"cannot write {args.file}: {exc.strerror or exc}") from None
        print(f"exported {len(stored)} tasks of team {team} to {args.file}", file=sys.stderr)
    else:
        sys.stdout.write(exported.text)
    if others:
        print(f"not in this file: the tasks of team {', '.join(others)} (a file applies to one team: "
              "export each with --team)", file=sys.stderr)
    if exported.references:
        print("secrets are written as references; set these environment variables before tasks apply:",
              file=sys.stderr)
        for name, where in sorted(exported.references.items()):
            print(f"  {name}  ({where})", file=sys.stderr)
    return 0


def _list(args: argparse.Namespace, settings: Settings) -> int:
    with _scheduler(settings) as scheduler:
        stored = sorted(scheduler.refresh_tasks(), key=lambda task: task.id)
        sources = TaskFileRepository(scheduler.engine).sources()
        now = scheduler.task_ops.now_ms()
    for task in stored:
        state = "disabled" if not task.enabled else "paused" if task.paused and task.paused.active(now) else "enabled"
        managed = f"file:{sources[task.id]}" if sources.get(task.id) else "-"
        print(f"{task.id}\t{state}\t{task.cron}\t{task.timezone}\t{task.handler_kind}\t{managed}")
    print(f"{len(stored)} tasks", file=sys.stderr)
    return 0


def _trigger(args: argparse.Namespace, settings: Settings) -> int:
    # No executors: this process runs nothing; the occurrence goes to a live node able to run it.
    with _scheduler(settings, executors=[]) as scheduler:
        occurrence = scheduler.submit(args.task_id, source="cli", idempotency_key=args.idempotency_key)
        execution = scheduler.execution.get(occurrence)
    reason = f" ({execution.reason})" if execution.reason else ""
    print(f"{args.task_id}: occurrence {occurrence} {execution.status}{reason}")
    return 1 if execution.status == ExecutionStatus.MISSED else 0


def _backfill(args: argparse.Namespace, settings: Settings) -> int:
    # No executors: this process runs nothing; the queued runs go to live nodes able to run them.
    with _scheduler(settings, executors=[]) as scheduler:
        task = scheduler.task_ops.get(check_id(args.task_id, "ID"))
        zone = ZoneInfo(_zone(args.tz) if args.tz is not None else task.timezone)
        start, end = instant(args.start, "--from", zone), instant(args.end, "--to", zone)
        try:
            result = scheduler.backfill(task.id, start, end, by="cli", reason=args.reason, dry_run=args.dry_run)
        except ConfigError as exc:  # named as the command's options
            flag = _FLAGS.get(exc.field or "")
            if flag is None:
                raise
            raise ConfigError(flag, exc.message.removeprefix(f"{exc.field}: ")) from None
    print(backfill_summary(result, zone))
    return 0


_FLAGS = {"start_ms": "--from", "end_ms": "--to", "reason": "--reason"}


def _zone(name: str) -> str:
    try:
        return validate_timezone(name)
    except ConfigError as exc:
        raise ConfigError("--tz", exc.message.removeprefix(f"{exc.field}: ")) from None


def instant(text: str, flag: str, zone: ZoneInfo) -> int:
    """Unix ms of ``text``: digits are unix ms; otherwise ISO 8601, read in ``zone`` when it has
    no offset (the first of a repeated wall time)."""
    text = text.strip()
    if text.isdigit():
        return check_ms(int(text), flag)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(flag, f"is not a time: write ISO 8601 (2026-12-01T09:00, with +01:00 or Z for another "
                                f"zone than {zone.key}) or unix ms (got {text[:40]!r})") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return check_ms(int(moment.timestamp() * 1000), flag)


def backfill_summary(result: BackfillResult, zone: ZoneInfo) -> str:
    """One line: what the range held and what was (or would be) queued."""
    if not result.count:
        return f"{result.task_id}: the range holds no fire time; nothing queued"
    def shown(ms: int | None) -> str:
        local = datetime.fromtimestamp((ms or 0) / 1000, zone).strftime("%Y-%m-%d %H:%M %Z")
        return f"{local} ({iso(ms or 0)})"
    span = f"{result.count} fire times, {shown(result.first_ms)} .. {shown(result.last_ms)}"
    verb = "would queue" if result.dry_run else "queued"
    return (f"{result.task_id}: {span}: {verb} {result.new + result.again} ({result.new} new, {result.again} missed or "
            f"skipped before); {result.already} ran or wait already, left as they are"
            + (" (dry run: nothing queued)" if result.dry_run else ""))
