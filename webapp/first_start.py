"""The session signing key and the first admin, created on first start.

The key is ``HAI_SECRET_KEY`` or, when absent, generated once and kept beside the SQLite file
(``<db>.secret-key``) or in ``HAI_SECRET_KEY_FILE`` / ``./hai-secret.key`` for server
databases -- never a hard-coded default. Every gunicorn worker reads the same file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from pathlib import Path

from werkzeug.security import generate_password_hash

from scheduler_core.db import DatabaseConfig
from scheduler_core.runtime.accounts import Accounts

ADMIN_NAME = "admin"


def _key_path(config: DatabaseConfig) -> Path:
    if os.environ.get("HAI_SECRET_KEY_FILE"):
        return Path(os.environ["HAI_SECRET_KEY_FILE"])
    if config.type == "sqlite":
        return Path(f"{config.database}.secret-key")
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
    """Create ``admin`` when no user exists; a generated password is printed once."""
    if users.count() > 0:
        return
    chosen = password or secrets.token_urlsafe(12)
    if users.create(ADMIN_NAME, "admin", generate_password_hash(chosen)) and not password:
        print(f"hai-scheduler: created user '{ADMIN_NAME}' with password {chosen} (shown once; "
              "change it with `hai-scheduler create-user admin --role admin --reset`)", file=sys.stderr, flush=True)
