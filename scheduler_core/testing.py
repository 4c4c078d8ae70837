"""Test support: move one engine's database clock, so a test reaches a minute boundary or the
end of a do-not-disturb window without waiting for it.

``set_clock_offset(engine, ms)`` shifts what ``db_now_ms()`` and ``db_statement_now_ms()``
read through ``engine`` -- and through no other engine -- by ``ms``. The database is not
touched: statements compiled for the engine add the offset, a parameter read each time they
run (see ``scheduler_core.db.clock``), so a change applies at once, to cached statements too.
An engine's first offset empties its compiled cache (what was compiled before carries no
offset): give an engine its first offset before other threads use it, as the test helpers do.

Processes a test starts get its offset through ``HAI_TEST_DB_CLOCK_OFFSET_MS`` and apply it
to their engine with ``set_clock_offset_from_env``; the product itself never reads it.
Refused when ``HAI_ENV=production``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from sqlalchemy.engine import Engine

from scheduler_core.db.clock import CLOCK_OFFSET_ATTRIBUTE
from scheduler_core.db.config import is_production
from scheduler_core.errors import ConfigError

OFFSET_ENV = "HAI_TEST_DB_CLOCK_OFFSET_MS"


class _Offset:
    """An engine's clock offset, on its dialect; compiled statements call it when they run."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def set_clock_offset(engine: Engine, offset_ms: int, environ: Mapping[str, str] | None = None) -> None:
    """From now on, ``engine`` reads the database clock ``offset_ms`` later (earlier if negative)."""
    if isinstance(offset_ms, bool) or not isinstance(offset_ms, int):
        raise ConfigError("offset_ms", f"must be an integer (got {offset_ms!r})")
    if offset_ms and is_production(environ):
        raise ConfigError(OFFSET_ENV, "a test clock offset is refused when HAI_ENV=production")
    offset = getattr(engine.dialect, CLOCK_OFFSET_ATTRIBUTE, None)
    if offset is not None:
        offset.ms = offset_ms
    elif offset_ms:
        setattr(engine.dialect, CLOCK_OFFSET_ATTRIBUTE, _Offset(offset_ms))
        engine.clear_compiled_cache()  # what was compiled before carries no offset


def clock_offset(engine: Engine) -> int:
    """``engine``'s clock offset in ms (0: none)."""
    offset = getattr(engine.dialect, CLOCK_OFFSET_ATTRIBUTE, None)
    return 0 if offset is None else int(offset())


def clock_offset_from_env(environ: Mapping[str, str] | None = None) -> int:
    """The offset ``HAI_TEST_DB_CLOCK_OFFSET_MS`` names (0: none), checked: an integer, and none
    when ``HAI_ENV=production``. Commands check it before they start anything."""
    env = os.environ if environ is None else environ
    raw = env.get(OFFSET_ENV, "").strip()
    if not raw:
        return 0
    if re.fullmatch(r"-?[0-9]{1,15}", raw) is None:
        raise ConfigError(OFFSET_ENV, f"must be a whole number of milliseconds, at most 15 digits (got {raw!r})")
    offset_ms = int(raw)
    if offset_ms and is_production(env):
        raise ConfigError(OFFSET_ENV, "a test clock offset is refused when HAI_ENV=production")
    return offset_ms


def set_clock_offset_from_env(engine: Engine, environ: Mapping[str, str] | None = None) -> int:
    """Give ``engine`` the offset ``HAI_TEST_DB_CLOCK_OFFSET_MS`` names (none: nothing changes);
    returns it. For processes a test starts, right after they create their engine."""
    env = os.environ if environ is None else environ
    offset_ms = clock_offset_from_env(env)
    if offset_ms:
        set_clock_offset(engine, offset_ms, env)
    return offset_ms
