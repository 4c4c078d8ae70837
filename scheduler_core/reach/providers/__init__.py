"""Notification providers: building them from configuration (``build_providers``), and the six
types ``smtp``, ``api`` (webhook), ``slack`` (a Slack or Mattermost incoming webhook), ``pagerduty``
(PagerDuty Events API v2), ``aliyun-sms`` and ``console``. Settings and outcomes per type:
docs/executors-and-providers.md."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scheduler_core.db.config import is_production
from scheduler_core.errors import ReachConfigError, UnsupportedTypeError
from scheduler_core.reach.base import Provider
from scheduler_core.reach.providers import console, pagerduty, slack, sms, smtp, webhook
from scheduler_core.reach.providers._config import Settings, check_name
from scheduler_core.reach.providers.console import ConsoleProvider
from scheduler_core.reach.providers.pagerduty import PagerDutyProvider
from scheduler_core.reach.providers.slack import SlackProvider
from scheduler_core.reach.providers.sms import AliyunSmsProvider
from scheduler_core.reach.providers.smtp import SmtpProvider
from scheduler_core.reach.providers.webhook import WebhookProvider

__all__ = ["PROVIDER_TYPES", "AliyunSmsProvider", "ConsoleProvider", "PagerDutyProvider", "SlackProvider",
           "SmtpProvider", "WebhookProvider", "build_provider", "build_providers"]

# type -> (the settings it accepts besides name and type, its constructor)
_TYPES: dict[str, tuple[tuple[str, ...], Callable[[Settings], Provider]]] = {
    "smtp": (smtp.SETTINGS, SmtpProvider.from_settings),
    "api": (webhook.SETTINGS, WebhookProvider.from_settings),
    "slack": (slack.SETTINGS, SlackProvider.from_settings),
    "pagerduty": (pagerduty.SETTINGS, PagerDutyProvider.from_settings),
    "aliyun-sms": (sms.SETTINGS, AliyunSmsProvider.from_settings),
    "console": (console.SETTINGS, ConsoleProvider.from_settings),
}
PROVIDER_TYPES = tuple(_TYPES)


def _check_environment(name: str, kind: str, environ: Mapping[str, str]) -> None:
    if kind == "console" and is_production(environ) and environ.get("HAI_E2E", "").strip() != "1":
        raise ReachConfigError(f"providers.{name}.type", "the console provider is refused when HAI_ENV=production "
                                                         "(it only logs; HAI_E2E=1 exempts end-to-end tests)")


def build_provider(config: Mapping[str, Any], environ: Mapping[str, str] | None = None, *,
                   index: int | None = None) -> Provider:
    """One provider from its configuration; ``index`` (its place in a list) only names fields in errors."""
    where = "providers" if index is None else f"providers[{index}]"
    if not isinstance(config, Mapping):
        raise ReachConfigError(where, f"must be a mapping with a name and a type (got {type(config).__name__})")
    name = check_name(config.get("name"), f"{where}.name")
    kind = config.get("type")
    if not isinstance(kind, str) or not kind:
        raise ReachConfigError(f"providers.{name}.type", f"is required: one of {', '.join(PROVIDER_TYPES)}")
    if kind not in _TYPES:
        raise UnsupportedTypeError(f"providers.{name}.type: unsupported provider type {kind[:64]!r} "
                                   f"(one of {', '.join(PROVIDER_TYPES)})", field=f"providers.{name}.type")
    _check_environment(name, kind, os.environ if environ is None else environ)
    allowed, build = _TYPES[kind]
    return build(Settings(name, config, allowed))


def build_providers(configs: Sequence[Mapping[str, Any]],
                    environ: Mapping[str, str] | None = None) -> dict[str, Provider]:
    """Every provider of a configuration list, by name; a name given twice is refused."""
    if isinstance(configs, str | bytes | Mapping) or not isinstance(configs, Sequence):
        raise ReachConfigError("providers", "must be a list of provider configurations")
    providers: dict[str, Provider] = {}
    for index, config in enumerate(configs):
        provider = build_provider(config, environ, index=index)
        if provider.name in providers:
            raise ReachConfigError(f"providers[{index}].name", f"provider name {provider.name!r} is given twice")
        providers[provider.name] = provider
    return providers
