"""Time zone names: which IANA names a task may use, and the cached zone for each.

Only names the system's tz database lists (plus ``"UTC"``) are accepted; ``None`` or ``""``
mean UTC. Names that resolve but follow the host (``localtime``) are refused, so fire times
never depend on the node.
"""

from __future__ import annotations

from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from scheduler_core.errors import ConfigError
from scheduler_core.validation import shown

__all__ = ["resolve_zone", "validate_timezone"]

# Loadable by ZoneInfo on some hosts but not a location: "localtime" follows the host's
# /etc/localtime, which would make fire times depend on the node.
_REFUSED_ZONES = frozenset({"localtime", "posixrules", "Factory"})


def validate_timezone(name: str | None) -> str:
    """Return the IANA zone name (``None`` or ``""`` mean ``"UTC"``) or raise :class:`ConfigError`."""
    return resolve_zone(name).key


def resolve_zone(name: str | None) -> ZoneInfo:
    """The zone for ``name`` (``None`` or ``""`` mean UTC); raises as :func:`validate_timezone` does."""
    if name is None or name == "":
        return _zone("UTC")
    if not isinstance(name, str):
        raise ConfigError("timezone", f"expected an IANA time zone name, got {type(name).__name__}")
    return _zone(name)


@lru_cache(maxsize=1024)
def _zone(name: str) -> ZoneInfo:
    refusal = f"{shown(name)} is not an IANA time zone name (e.g. 'Europe/Berlin' or 'UTC')"
    # Membership keeps out absolute paths, "posix/..." and "right/..." copies and
    # case variants that only resolve on case-insensitive file systems.
    if name in _REFUSED_ZONES or name not in _known_zones():
        raise ConfigError("timezone", refusal, value=name)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ConfigError("timezone", refusal, value=name) from exc


@lru_cache(maxsize=1)
def _known_zones() -> frozenset[str]:
    return frozenset(available_timezones()) | {"UTC"}
