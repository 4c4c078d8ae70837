"""The ``hai-scheduler`` command line.

Commands (the dashboard adds ``serve`` and ``create-user``: see webapp/cli.py):
  hai-scheduler db upgrade   apply schema migrations (safe twice, safe from two processes)
  hai-scheduler db status    database health, clock and migration state
  hai-scheduler node         run a scheduler node without the web
  hai-scheduler tasks ...    tasks as code: apply, export, list, trigger (scheduler_core/tasks_cli.py)

Configuration comes from ``HAI_DATABASE_URL`` (default ``sqlite:///scheduler.db``; a relative
SQLite path is taken from the current working directory) and ``HAI_DATABASE_*``;
``--database-url`` overrides the URL. Every command reads and checks all its settings first
(scheduler_core/settings.py). Errors print one line, ``error: <code> <field>: <message>``, and
exit with status 1; nothing is printed with secrets.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core import __version__
from scheduler_core.db import close_engine, create_engine, health_check, migration_state, upgrade
from scheduler_core.db.galera import galera_node
from scheduler_core.db.replication import replication_state
from scheduler_core.errors import GaleraSettingError, ReachError, SchedulerError
from scheduler_core.process_stop import stop_on_signals, wait_for_stop
from scheduler_core.settings import Settings, likely_typos, read_settings

NO_DATABASE = 4  # `db status`: the SQLite file does not exist (3: migrations are pending)
REFUSED_SETTING = 5  # `db status`: a Galera node set up against a rule (a scheduler node would not start)


def main(argv: Sequence[str] | None = None) -> int:
    parser, _ = build_parser()
    return dispatch(parser, argv)


def build_parser() -> tuple[argparse.ArgumentParser, Any]:
    """The ``hai-scheduler`` parser with the core commands; returns it and its subparsers."""
    parser = argparse.ArgumentParser(prog="hai-scheduler", description="hai-scheduler: distributed cron scheduler")
    parser.add_argument("--version", action="version", version=f"hai-scheduler {__version__}")
    commands = parser.add_subparsers(title="commands")
    add_core_commands(commands)
    return parser, commands


def dispatch(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Read the settings, then run the chosen command with them; an error prints one line with
    its stable code and the field it names, and exits 1."""
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        return 2
    for typo in likely_typos(os.environ):  # first: a misspelt name may be why a setting below is refused
        print(f"warning: {typo}", file=sys.stderr)
    try:
        settings = read_settings(args)
        for typo in likely_typos({}, settings.dashboard):
            print(f"warning: {typo}", file=sys.stderr)
        return int(args.handler(args, settings))
    except (SchedulerError, ReachError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def add_core_commands(commands: Any) -> None:
    """The commands that need no web server: ``db upgrade``, ``db status``, ``node``, ``tasks``."""
    node = commands.add_parser("node", help="run a scheduler node without the web dashboard (until SIGTERM)")
    node.add_argument("--database-url", help="overrides HAI_DATABASE_URL")
    node.add_argument("--node-id", help="defaults to host-pid-random")
    node.add_argument("--max-concurrency", type=int, default=6)
    add_node_routing_options(node)
    node.set_defaults(handler=_node)
    db = commands.add_parser("db", help="database schema and health")
    db_commands = db.add_subparsers(title="db commands")
    for name, handler, text in (
        ("upgrade", _db_upgrade, "apply schema migrations up to the newest revision"),
        ("status", _db_status, "print database health, clock and migration state"),
    ):
        sub = db_commands.add_parser(name, help=text)
        sub.add_argument("--database-url", help="overrides HAI_DATABASE_URL")
        sub.set_defaults(handler=handler)
    from scheduler_core.tasks_cli import add_task_commands  # here: --help and `db` start without the runtime

    add_task_commands(commands)


def add_node_routing_options(parser: argparse.ArgumentParser) -> None:
    """``--hooks`` and ``--group``: what a node can run (``node`` and ``serve``)."""
    parser.add_argument("--hooks", metavar="MODULE:ATTR",
                        help="the application's hooks object (e.g. myapp.jobs:hooks; default HAI_HOOKS): "
                             "without it, this node runs no hook tasks")
    parser.add_argument("--group", action="append", dest="groups", metavar="NAME",
                        help="a node group this node serves (repeatable; default HAI_NODE_GROUPS, comma-separated)")


def node_hooks(args: argparse.Namespace, settings: Settings) -> object | None:
    """The hooks ``--hooks`` / ``HAI_HOOKS`` name, imported now (the current directory is
    importable, as under gunicorn): a typo is a named error before anything starts."""
    from scheduler_core.runtime.hooks import load_hooks

    if not settings.hooks:
        return None
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return load_hooks(settings.hooks, "--hooks" if args.hooks else "HAI_HOOKS")


def _engine(settings: Settings) -> Engine:
    return create_engine(settings.database)


def _db_upgrade(args: argparse.Namespace, settings: Settings) -> int:
    engine = _engine(settings)
    try:
        state = upgrade(engine)
    finally:
        close_engine(engine)
    change = f"{state.previous or 'empty'} -> {state.current}" if state.changed else "already at head"
    print(f"schema upgraded: {change} ({settings.database.redacted()['url']})")
    return 0


def _db_status(args: argparse.Namespace, settings: Settings) -> int:
    config = settings.database
    if config.type == "sqlite" and not os.path.exists(config.sqlite_path()):  # look, never create
        print(f"no database: {config.sqlite_path()} does not exist (hai-scheduler db upgrade creates it)")
        return NO_DATABASE
    engine = _engine(settings)
    try:
        now_ms = health_check(engine)
        state = migration_state(engine)
        replication = replication_state(engine)
        galera = galera_node(engine)
    finally:
        close_engine(engine)
    report = {
        "database": config.redacted(),
        "healthy": True,
        "replication": replication.to_json(),
        "galera": None if galera is None else galera.to_json(),
        "database_clock": datetime.fromtimestamp(now_ms / 1000, UTC).isoformat(timespec="milliseconds"),
        "schema": {"current": state.current, "head": state.head, "up_to_date": state.up_to_date},
    }
    print(json.dumps(report, indent=2))
    if replication.warning:
        print(f"warning: {replication.warning}", file=sys.stderr)
    if galera is not None and galera.problem:
        print(f"error: {GaleraSettingError.code} {galera.problem}", file=sys.stderr)
        return REFUSED_SETTING
    return 0 if state.up_to_date else 3


def _node(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here, not at the top: `db` commands and --help then start without the runtime.
    from scheduler_core.config import SchedulerConfig
    from scheduler_core.runtime import Scheduler
    from scheduler_core.testing import clock_offset_from_env, set_clock_offset_from_env

    hooks = node_hooks(args, settings)
    clock_offset_from_env()  # a bad test clock offset (or one in production) stops it before it connects
    values: dict[str, Any] = {"max_concurrency": args.max_concurrency, "groups": settings.groups}
    if args.node_id:
        values["node_id"] = args.node_id
    config = SchedulerConfig(**values)
    engine = _engine(settings)
    # HAI_TEST_DB_CLOCK_OFFSET_MS, as every dashboard worker applies it (webapp/app.py): a test's
    # nodes and dashboard must read one database clock
    set_clock_offset_from_env(engine)
    scheduler = Scheduler(engine, config, hooks=hooks)
    stop = stop_on_signals()
    reach = None
    try:
        scheduler.init()
        reach = _node_reach(settings, scheduler)
        scheduler.start()
        print(f"node {scheduler.config.node_id} running; SIGTERM or Ctrl-C stops it", flush=True)
        wait_for_stop(stop)
    finally:
        if reach is not None:
            reach.close()
        scheduler.close()
        close_engine(engine)
    return 0


def _node_reach(settings: Settings, scheduler: Any) -> Any:
    """Notifications on the node's tick (delivery rounds, alerts) when they are configured
    (HAI_REACH_CONFIG, or REACH in HAI_CONFIG_FILE), as in every dashboard worker."""
    from scheduler_core.reach import Reach

    config = settings.dashboard.get("REACH")
    if config is None and settings.reach_config:
        with open(settings.reach_config, encoding="utf-8") as source:
            config = json.load(source)  # checked when the settings were read
    if config is None:
        return None
    reach = Reach(scheduler.engine, config, node_id=scheduler.config.node_id, auto_migrate=False,
                  public_url=settings.public_url or "")
    reach.init()
    reach.attach(scheduler)
    return reach


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
