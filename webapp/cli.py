"""The ``hai-scheduler`` console script: the core commands plus the dashboard's.

  hai-scheduler serve [--bind HOST:PORT]           the dashboard under gunicorn, one node per worker
  hai-scheduler create-user NAME --role ROLE       add a user (password asked, or HAI_NEW_PASSWORD)
  hai-scheduler create-token USER [--name N] [--expires-days D]   a personal API token, printed once
  hai-scheduler teams create ID [--name N] | rename ID NAME | delete ID | list   teams (docs/teams.md)
  hai-scheduler db upgrade | db status | node      see scheduler_core/cli.py

Every command reads and checks its settings first (scheduler_core/settings.py): ``serve`` refuses
a bad one with one line naming it before it binds a port or boots a worker.
"""

from __future__ import annotations

import argparse
import getpass
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy.engine import Engine
from werkzeug.security import generate_password_hash

from scheduler_core.cli import add_node_routing_options, build_parser, dispatch, node_hooks
from scheduler_core.db import close_engine, create_engine, migration_state, upgrade
from scheduler_core.errors import ConfigError, SchedulerError
from scheduler_core.runtime.accounts import ROLES, Accounts, check_new_password, check_username
from scheduler_core.settings import Settings
from scheduler_core.testing import clock_offset_from_env
from webapp.identity_provider import discover
from webapp.token_cli import add_token_command


def main(argv: Sequence[str] | None = None) -> int:
    parser, commands = build_parser()
    serve = commands.add_parser("serve", help="serve the dashboard (gunicorn; one scheduler node per worker)")
    serve.add_argument("--bind", metavar="HOST:PORT", help="default HAI_BIND, else 127.0.0.1:8000")
    serve.add_argument("--workers", type=int, metavar="N", help="gunicorn workers, 1-256 (default HAI_WORKERS, else 2)")
    add_node_routing_options(serve)
    serve.set_defaults(handler=_serve)
    user = commands.add_parser("create-user", help="create a dashboard user (or reset its password and role)")
    user.add_argument("name")
    user.add_argument("--role", choices=ROLES, required=True)
    user.add_argument("--reset", action="store_true",
                      help="for an existing user: set a new password, and the role given")
    user.set_defaults(handler=_create_user)
    add_token_command(commands)
    teams = commands.add_parser("teams", help="team namespaces: create, list (docs/teams.md)")
    team_commands = teams.add_subparsers(dest="teams_command", required=True,
                                         metavar="{create,rename,delete,list}")
    create = team_commands.add_parser("create", help="create a team (then put tasks and people in it)")
    create.add_argument("team_id", metavar="ID", help="lower-case letters, digits and -, up to 64")
    create.add_argument("--name", help="its display name (default: the id)")
    create.set_defaults(handler=_create_team)
    rename = team_commands.add_parser("rename", help="change a team's display name (its id stays)")
    rename.add_argument("team_id", metavar="ID")
    rename.add_argument("name", metavar="NAME")
    rename.set_defaults(handler=_team_action)
    remove = team_commands.add_parser("delete", help="delete a team without tasks, and the roles granted in it")
    remove.add_argument("team_id", metavar="ID")
    remove.set_defaults(handler=_team_action)
    listing = team_commands.add_parser("list", help="every team, one line each")
    listing.set_defaults(handler=_list_teams)
    for command in (create, rename, remove, listing):
        command.add_argument("--database-url", help="overrides HAI_DATABASE_URL")
    return dispatch(parser, argv)


def _create_team(args: argparse.Namespace, settings: Settings) -> int:
    engine = create_engine(settings.database)
    try:
        upgrade(engine)
        team = Accounts(engine).create_team(args.team_id, args.name)
    finally:
        close_engine(engine)
    print(f"team {team.id!r} created ({team.name})")
    return 0


def _team_action(args: argparse.Namespace, settings: Settings) -> int:
    engine = create_engine(settings.database)
    try:
        upgrade(engine)
        accounts = Accounts(engine)
        if args.teams_command == "rename":
            team = accounts.rename_team(args.team_id, args.name)
            done = f"team {team.id!r} renamed ({team.name})"
        else:
            grants = accounts.delete_team(args.team_id)
            done = f"team {args.team_id!r} deleted ({grants} role(s) in it removed)"
    finally:
        close_engine(engine)
    print(done)
    return 0


def _list_teams(args: argparse.Namespace, settings: Settings) -> int:
    engine = create_engine(settings.database)
    try:
        upgrade(engine)
        for team in Accounts(engine).team_list():
            print(f"{team.id}\t{team.name}")
    finally:
        close_engine(engine)
    return 0


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    node_hooks(args, settings)  # imported once here: a bad --hooks stops serve before any worker boots
    _check_listen(settings.bind, "--bind" if args.bind is not None else "HAI_BIND")
    clock_offset_from_env()  # tests' DB clock offset, applied by each worker (webapp/app.py): checked here
    if settings.sign_on.oidc is not None:  # an issuer without discovery stops it here, before any file is made
        discover(settings.sign_on.oidc, settings.environment)
    engine = create_engine(settings.database)  # health-checked: an unreachable database stops it here
    try:
        if settings.sign_on.oidc is not None:
            _check_mapped_teams(engine, settings.sign_on.oidc.teams)
    finally:
        close_engine(engine)
    # gunicorn's master (gunicorn_conf.py) and each worker (webapp.node.make_scheduler) read the
    # settings again: hand them the ones chosen here, flags included.
    os.environ.update(HAI_BIND=settings.bind, HAI_WORKERS=str(settings.workers),
                      HAI_NODE_GROUPS=",".join(settings.groups))
    if settings.hooks:
        os.environ["HAI_HOOKS"] = settings.hooks
    config = Path(__file__).with_name("gunicorn_conf.py")
    command = [sys.executable, "-m", "gunicorn", "-c", str(config), "--bind", settings.bind,
               "--workers", str(settings.workers), "--threads", str(settings.threads), "webapp.wsgi:app"]
    os.execv(sys.executable, command)  # gunicorn takes over this process (signals go straight to it)
    return 0  # pragma: no cover


def _check_mapped_teams(engine: Engine, named: list[str]) -> None:
    """Each team ``HAI_OIDC_GROUP_ROLES`` grants a role in exists (when the schema has teams: a
    database not migrated yet is migrated by the workers, and a sign-on to a missing team is refused)."""
    if not named or migration_state(engine).current is None:
        return
    try:
        known = set(Accounts(engine).teams())
    except SchedulerError:  # no teams table yet (an older schema): the workers migrate it
        return
    missing = [team for team in named if team not in known]
    if missing:
        raise ConfigError("HAI_OIDC_GROUP_ROLES", f"names teams this dashboard does not have: {', '.join(missing)} "
                                                  f"(create them: hai-scheduler teams create {missing[0]})")


def _check_listen(bind: str, field: str) -> None:
    """Listen on ``bind`` once and let go: a host that does not resolve, a port in use or a
    privileged one is one line here, not gunicorn retrying for seconds."""
    if bind.startswith("unix:"):
        return
    host, _, port = bind.rpartition(":")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except (OSError, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(field, f"cannot listen on {bind}: {reason} (give HOST:PORT, e.g. 127.0.0.1:8000)") from None


def _create_user(args: argparse.Namespace, settings: Settings) -> int:
    check_username(args.name)
    password_hash = generate_password_hash(_new_password(args.name))
    engine = create_engine(settings.database)
    try:
        upgrade(engine)
        done = _reset(Accounts(engine), args.name, args.role, password_hash) if args.reset else \
            _create(Accounts(engine), args.name, args.role, password_hash)
    finally:
        close_engine(engine)
    print(done)
    return 0


def _new_password(name: str) -> str:
    """``HAI_NEW_PASSWORD``, else asked on the terminal; checked by the rule the dashboard applies."""
    if os.environ.get("HAI_NEW_PASSWORD"):
        return _checked_password(os.environ["HAI_NEW_PASSWORD"], "HAI_NEW_PASSWORD")
    if not sys.stdin.isatty():
        raise ConfigError("HAI_NEW_PASSWORD", "is required when there is no terminal to ask for the password")
    try:
        typed = getpass.getpass(f"password for {name}: ")
    except EOFError:
        raise ConfigError("password", "none was typed (end of input)") from None
    return _checked_password(typed, "password")


def _checked_password(password: str, field: str) -> str:
    try:
        return check_new_password(password, password)
    except ConfigError as exc:
        raise ConfigError(field, exc.message.removeprefix(f"{exc.field}: ")) from None


def _create(users: Accounts, name: str, role: str, password_hash: str) -> str:
    if not users.create(name, role, password_hash):
        raise ConfigError("name", f"user {name!r} exists (--reset sets its password and role)")
    return f"user {name!r} created ({role})"


def _reset(users: Accounts, name: str, role: str, password_hash: str) -> str:
    """The new password, and the role given: the role first, so that a refused change (the last
    admin demoted) leaves the password as it was too."""
    user = users.get(name)
    if user is None:
        raise ConfigError("name", f"no user {name!r} (without --reset, create-user creates it)")
    if user.role != role:
        users.set_role(name, role, user.updated_at)
    if not users.set_password(name, password_hash):
        raise ConfigError("name", f"no user {name!r}")
    change = f"role {user.role or 'none'} -> {role}" if user.role != role else f"role {role} unchanged"
    return f"user {name!r}: password reset, {change}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
