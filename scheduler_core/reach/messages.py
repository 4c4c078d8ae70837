"""A message as ``Reach.send`` takes it, turned into what a provider sends.

``compose`` checks the caller's mapping field by field (``to``, ``provider``, ``template``,
``subject``, ``body``, ``vars``, ``extra``), renders the template when one is named, checks the
rendered subject and body, finds the provider and checks the recipient against it. Every refusal
is a ReachError naming the field; nothing is sent or queued here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scheduler_core.errors import ProviderNotFoundError, ReachConfigError
from scheduler_core.reach.base import Provider, RenderedMessage
from scheduler_core.reach.config import TEMPLATE_SUBJECT_MAX, TemplateConfig
from scheduler_core.reach.templates import check_vars, render
from scheduler_core.validation import ID_MAX, check_json_object, check_optional_text, check_team, check_text

__all__ = ["MESSAGE_FIELDS", "RECIPIENT_MAX", "RENDERED_BODY_MAX", "compose", "message_team"]

MESSAGE_FIELDS = ("to", "provider", "template", "subject", "body", "vars", "extra", "team")
RECIPIENT_MAX = 1_024  # an address, a phone number, a webhook id or URL
RENDERED_BODY_MAX = 1_000_000  # a template's 65,535 characters with its variables filled in


def compose(message: Mapping[str, Any], find_template: Callable[[Any], TemplateConfig],
            providers: Mapping[str, Provider]) -> tuple[Provider, RenderedMessage, str | None]:
    """The provider, the rendered message and the template's name (None for a direct send)."""
    if not isinstance(message, Mapping):
        raise ReachConfigError("message", "must be a mapping")
    for key in message:
        if key not in MESSAGE_FIELDS:
            raise ReachConfigError(str(key)[:64], "is not a message field")
    to = check_text(message.get("to"), "to", RECIPIENT_MAX, ReachConfigError, single_line=True)
    extra = check_json_object(message.get("extra"), "extra", ReachConfigError) or {}
    provider_name = check_optional_text(message.get("provider"), "provider", ID_MAX, ReachConfigError)
    subject, body = message.get("subject"), message.get("body")
    template_name = message.get("template")
    if template_name is not None:
        template = find_template(template_name)
        values = check_vars(message.get("vars"))
        provider_name = provider_name or template.provider
        if template.subject:
            subject = render(template.subject, values, f"template {template.name} subject")
        body = render(template.body, values, f"template {template.name} body")
    elif body is None:
        raise ReachConfigError("body", "is required for a message without a template")
    elif provider_name is None:
        raise ReachConfigError("provider", "is required for a message without a template")
    # Checked after rendering: a variable may not smuggle a line break into a mail header.
    subject = check_optional_text(subject, "subject", TEMPLATE_SUBJECT_MAX, ReachConfigError, single_line=True)
    body = check_text(body, "body", RENDERED_BODY_MAX, ReachConfigError)
    assert provider_name is not None  # a template always names its provider
    provider = providers.get(provider_name)
    if provider is None:
        raise ProviderNotFoundError(f"provider {provider_name!r} is not configured")
    provider.validate_recipient(to)
    return provider, RenderedMessage(to, subject, body, dict(extra)), template_name


def message_team(message: Mapping[str, Any]) -> str | None:
    """The team a message is about (its queue row is that team's to see and settle), or None:
    every team's, for global users. A team id's form only: that it exists is the queue's check."""
    team = message.get("team") if isinstance(message, Mapping) else None
    return None if team is None else check_team(team, "team", ReachConfigError)
