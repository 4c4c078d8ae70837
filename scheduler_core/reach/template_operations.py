"""``reach.templates``: stored templates (create, read, update, delete with versions) and
previews of any template, configured or stored.

Templates from the configuration are read-only and win over a stored one of the same name, so a
stored template may not take a configured name.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.engine import Engine

from scheduler_core.errors import ReachConfigError, ReachError, TemplateNotFoundError
from scheduler_core.reach.config import TemplateConfig, check_template, check_template_name
from scheduler_core.reach.templates import check_vars, missing_variables, render
from scheduler_core.store.reach_templates import StoredTemplate, TemplateRepository
from scheduler_core.validation import check_ms

__all__ = ["TemplateHost", "TemplateOperations", "TemplatePreview"]


class TemplateHost(Protocol):
    """What template operations need of the notification service that owns them (``Reach``),
    declared here so that this module does not import reach/service.py, which imports it."""

    def require_engine(self) -> Engine: ...

    def find_template(self, name: Any) -> TemplateConfig: ...

    def provider_names(self) -> list[str]: ...

    def configured_templates(self) -> list[TemplateConfig]: ...


@dataclass(frozen=True)
class TemplatePreview:
    """A rendering without sending, or the variables it lacks."""

    template: TemplateConfig
    variables: list[str]  # every variable the subject and body use, sorted
    missing: list[str]  # those the values lack; when any, nothing is rendered
    subject: str | None
    body: str | None


class TemplateOperations:
    """``reach.templates``: stored templates (CRUD with versions) and previews of any template.

    Templates from the configuration are read-only and win over a stored one of the same name,
    so a stored template may not take a configured name."""

    def __init__(self, reach: TemplateHost) -> None:
        self._reach = reach

    def _repo(self) -> TemplateRepository:
        return TemplateRepository(self._reach.require_engine())

    def save(self, name: str, provider: str, body: str, subject: str | None = None) -> TemplateConfig:
        """Insert or replace a stored template (no version check: see create / update)."""
        self._check(name, provider, body, subject)
        self._refuse_configured(name)
        self._repo().save(name, provider, subject, body)
        return TemplateConfig(name=name, provider=provider, body=body, subject=subject)

    def get(self, name: str) -> TemplateConfig:
        return self._reach.find_template(name)

    def list(self) -> list[TemplateConfig]:
        return [TemplateConfig(t.name, t.provider, t.body, t.subject) for t in self._repo().list()]

    def stored(self) -> builtins.list[StoredTemplate]:
        """Stored templates with their versions (``updated_at``), by name."""
        return self._repo().list()

    def stored_one(self, name: str) -> StoredTemplate | None:
        return self._repo().get(check_template_name(name))

    def create(self, name: str, provider: str, body: str, subject: str | None = None) -> StoredTemplate:
        """A new stored template; ReachConfigError("name") when the name is taken."""
        self._check(name, provider, body, subject)
        self._refuse_configured(name)
        if not self._repo().create(name, provider, subject, body):
            raise ReachConfigError("name", f"a stored template named {name!r} already exists")
        return self._saved(name)

    def update(self, name: str, provider: str, body: str, subject: str | None,
               expected_updated_at: int) -> StoredTemplate:
        """Replace a stored template's content at the version read; a conflict when it changed."""
        self._check(name, provider, body, subject)
        self._refuse_configured(name)
        _version(expected_updated_at)
        if not self._repo().update(name, provider, subject, body, expected_updated_at):
            self._saved(name)  # not found when it is gone
            raise ReachError(f"template {name!r} changed since it was read; read it again", template=name,
                             conflict=True)
        return self._saved(name)

    def delete(self, name: str, expected_updated_at: int | None = None) -> None:
        """Delete a stored template (at the version read, when given)."""
        check_template_name(name)
        if expected_updated_at is not None:
            _version(expected_updated_at)
        if not self._repo().delete(name, expected_updated_at):
            self._saved(name)
            raise ReachError(f"template {name!r} changed since it was read; read it again", template=name,
                             conflict=True)

    def preview(self, name: str, values: Mapping[str, Any]) -> tuple[str | None, str]:
        """Render without sending; TEMPLATE_RENDER_FAILED names every missing variable."""
        template = self._reach.find_template(name)
        checked = check_vars(values)
        subject = render(template.subject, checked, f"template {name} subject") if template.subject else None
        return subject, render(template.body, checked, f"template {name} body")

    def check(self, name: str, values: Mapping[str, Any]) -> TemplatePreview:
        """Like :meth:`preview`, but a missing variable is an answer, not an error: it lists them
        all (and renders nothing while any is missing)."""
        template = self._reach.find_template(name)
        checked = check_vars(values)
        used = missing_variables({}, template.subject, template.body)
        missing = missing_variables(checked, template.subject, template.body)
        if missing:
            return TemplatePreview(template, used, missing, None, None)
        subject, body = self.preview(name, checked)
        return TemplatePreview(template, used, [], subject, body)

    def _check(self, name: Any, provider: Any, body: Any, subject: Any) -> None:
        check_template(name, provider, body, subject)
        if provider not in self._reach.provider_names():
            raise ReachConfigError("provider", f"names no configured provider ({provider!r})")

    def _refuse_configured(self, name: str) -> None:
        if any(t.name == name for t in self._reach.configured_templates()):
            raise ReachConfigError("name", f"{name!r} is a configured template (read-only); choose another name")

    def _saved(self, name: str) -> StoredTemplate:
        stored = self._repo().get(name)
        if stored is None:
            raise TemplateNotFoundError(f"template {name!r} not found")
        return stored


def _version(value: Any) -> int:
    return check_ms(value, "expected_updated_at", ReachConfigError)
