"""The ``hai-scheduler`` console script: the core commands plus the dashboard's.

  hai-scheduler serve [--bind HOST:PORT]           the dashboard under gunicorn, one node per worker
  hai-scheduler create-user NAME --role ROLE       add a user (password asked, or HAI_NEW_PASSWORD)
  hai-scheduler db upgrade | db status | node      see scheduler_core/cli.py
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from werkzeug.security import generate_password_hash

from scheduler_core.cli import add_node_routing_options, build_parser, dispatch, node_groups, node_hooks
from scheduler_core.config import SchedulerConfig
from scheduler_core.db import DatabaseConfig, close_engine, create_engine, upgrade
from scheduler_core.errors import ConfigError
from scheduler_core.runtime.accounts import ROLES, Accounts, check_new_password, check_username


def main(argv: Sequence[str] | None = None) -> int:
    parser, commands = build_parser()
    serve = commands.add_parser("serve", help="serve the dashboard (gunicorn; one scheduler node per worker)")
    serve.add_argument("--bind", default=os.environ.get("HAI_BIND", "127.0.0.1:8000"), help="HOST:PORT")
    serve.add_argument("--workers", type=int, default=int(os.environ.get("HAI_WORKERS", "2")))
    add_node_routing_options(serve)
    serve.set_defaults(handler=_serve)
    user = commands.add_parser("create-user", help="create a dashboard user (or reset its password)")
    user.add_argument("name")
    user.add_argument("--role", choices=ROLES, required=True)
    user.add_argument("--reset", action="store_true", help="set a new password for an existing user")
    user.set_defaults(handler=_create_user)
    return dispatch(parser, argv)


def _serve(args: argparse.Namespace) -> int:
    node_hooks(args)  # imported once here: a bad --hooks stops serve before any worker boots
    groups = SchedulerConfig(groups=node_groups(args)).groups
    if args.hooks:  # each worker builds its node from these (webapp.node.make_scheduler)
        os.environ["HAI_HOOKS"] = args.hooks
    os.environ["HAI_NODE_GROUPS"] = ",".join(groups)
    config = Path(__file__).with_name("gunicorn_conf.py")
    command = [sys.executable, "-m", "gunicorn", "-c", str(config), "--bind", args.bind,
               "--workers", str(args.workers), "webapp.wsgi:app"]
    os.execv(sys.executable, command)  # gunicorn takes over this process (signals go straight to it)
    return 0  # pragma: no cover


def _create_user(args: argparse.Namespace) -> int:
    password = os.environ.get("HAI_NEW_PASSWORD") or getpass.getpass(f"password for {args.name}: ")
    try:
        check_username(args.name)
        check_new_password(password, password)
    except ConfigError as exc:
        print(f"error: {exc.field} {exc.message}", file=sys.stderr)
        return 1
    engine = create_engine(DatabaseConfig.from_env())
    try:
        upgrade(engine)
        users = Accounts(engine)
        if args.reset:
            if not users.set_password(args.name, generate_password_hash(password)):
                print(f"error: no user {args.name!r}", file=sys.stderr)
                return 1
        elif not users.create(args.name, args.role, generate_password_hash(password)):
            print(f"error: user {args.name!r} exists (use --reset to change its password)", file=sys.stderr)
            return 1
    finally:
        close_engine(engine)
    print(f"user {args.name!r} ready ({args.role})")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
