"""The session signing key and the first admin, created on first start.

The key is ``HAI_SECRET_KEY`` or, when absent, generated once and kept beside the SQLite file
(``<db>.secret-key``, the database's absolute path) or in ``HAI_SECRET_KEY_FILE`` /
``./hai-secret.key`` for server databases -- never a hard-coded default. Every gunicorn worker
reads the same file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sys
from pathlib import Path

from werkzeug.security import generate_password_hash

from scheduler_core.db import DatabaseConfig
from scheduler_core.runtime.accounts import Accounts
from scheduler_core.settings import check_admin_password

ADMIN_NAME = "admin"


def _key_path(config: DatabaseConfig) -> Path:
    if os.environ.get("HAI_SECRET_KEY_FILE"):
        return Path(os.environ["HAI_SECRET_KEY_FILE"])
    if config.type == "sqlite":
        return Path(f"{config.sqlite_path()}.secret-key")
    return Path("hai-secret.key")


def secret_key(config: DatabaseConfig) -> str:
    path = _key_path(config)
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # one creator wins
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
    key = path.read_text().strip()
    if len(key) < 32:
        raise RuntimeError(f"the secret key file {path} is too short; delete it to regenerate")
    return key


def bootstrap_admin(users: Accounts, password: str | None) -> None:
    """Create ``admin`` when no user exists; a generated password is printed once, with the
    command that changes it."""
    if users.count() > 0:
        return
    chosen = check_admin_password(password) if password else secrets.token_urlsafe(12)
    if users.create(ADMIN_NAME, "admin", generate_password_hash(chosen)) and not password:
        print(f"hai-scheduler: created user '{ADMIN_NAME}' with password {chosen} (shown once; change it with "
              f"`{_command()} create-user {ADMIN_NAME} --role admin --reset`)", file=sys.stderr, flush=True)


def _command() -> str:
    """``hai-scheduler`` when it is on PATH, else the one beside this Python (``.venv/bin/...``,
    relative to the current directory when inside it)."""
    beside = Path(sys.executable).with_name("hai-scheduler")
    if shutil.which("hai-scheduler") == str(beside) or not beside.exists():
        return "hai-scheduler"
    with contextlib.suppress(ValueError):
        return str(Path(os.path.abspath(beside)).relative_to(Path.cwd()))
    return str(beside)
