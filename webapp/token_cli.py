"""``hai-scheduler create-token USER [--name N] [--expires-days D]``: a personal API token.

The token is printed once, alone on standard output (a script can capture it); what it is
(id, user, role, expiry) goes to standard error. The database keeps its SHA-256 only. Every
bad argument is one line ``error: <code> <field>: <message>`` and exit status 1, before
anything is written; so is a name the user's tokens already have (revoked ones included):
``error: hai:scheduler:012 --name: 'ci-bot' already has a token named 'cli' ...``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from scheduler_core.db import close_engine, create_engine, upgrade
from scheduler_core.errors import ConfigError
from scheduler_core.runtime.accounts import check_username
from scheduler_core.runtime.api_tokens import MAX_EXPIRES_DAYS, ApiTokens, check_expires_days, check_token_name
from scheduler_core.settings import Settings
from scheduler_core.validation import shown

DEFAULT_NAME = "cli"


def add_token_command(commands: Any) -> None:
    token = commands.add_parser("create-token", help="create a personal API token for a user (printed once)")
    token.add_argument("user")
    token.add_argument("--name", default=DEFAULT_NAME, help=f"a label for the token (default {DEFAULT_NAME!r})")
    token.add_argument("--expires-days", metavar="D",
                       help=f"expire after D days, 1-{MAX_EXPIRES_DAYS} (default: until revoked)")
    token.set_defaults(handler=_create_token)


def _days(text: str | None) -> int | None:
    """``--expires-days`` as a whole number written in ASCII digits (``²`` and ``٣`` are not)."""
    if text is None:
        return None
    digits = text.strip()
    if not digits.isascii() or not digits.isdigit() or len(digits) > 6:
        raise ConfigError("--expires-days", f"must be a whole number of days, 1-{MAX_EXPIRES_DAYS} (got {shown(text)})")
    return check_expires_days(int(digits), "--expires-days")


def _create_token(args: argparse.Namespace, settings: Settings) -> int:
    check_username(args.user, "user")  # every argument is checked before the database is touched
    name = check_token_name(args.name, "--name")
    days = _days(args.expires_days)
    engine = create_engine(settings.database)
    try:
        upgrade(engine)
        created = ApiTokens(engine).create(args.user, name, days)
    except ConfigError as exc:
        if exc.field != "name":
            raise
        raise ConfigError("--name", exc.message.removeprefix("name: ")) from None  # the flag that names it
    finally:
        close_engine(engine)
    token = created.token
    expiry = "never expires" if token.expires_at is None else f"expires in {days} day(s)"
    print(f"token {token.id} ({token.name!r}) for user {token.username!r}, {expiry}; "
          "it is shown only this once:", file=sys.stderr)
    print(created.secret)
    return 0
