"""Stored notification templates (``reach_templates``): the database side of ``reach.templates``.

Versions are ``updated_at`` (DB-clock ms, strictly increasing per row): edits and deletes are
compare-and-set on it, so a stale form never overwrites a newer template.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection, Engine

from scheduler_core.db.clock import db_now_ms, db_statement_now_ms, to_ms
from scheduler_core.db.tables import reach_templates
from scheduler_core.store.dialect import greatest, insert_ignore
from scheduler_core.store.transactions import one_row, read, write


@dataclass(frozen=True)
class StoredTemplate:
    name: str
    provider: str
    subject: str | None
    body: str
    updated_at: int


class TemplateRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def save(self, name: str, provider: str, subject: str | None, body: str) -> None:
        """Insert or replace a template."""

        def work(conn: Connection) -> None:
            now = db_statement_now_ms()  # one reading: created_at = updated_at
            conn.execute(insert_ignore(conn, reach_templates, [{
                "name": name, "provider": provider, "subject": subject, "body": body, "created_at": now,
                "updated_at": now}]))
            conn.execute(update(reach_templates).where(reach_templates.c.name == name).values(
                provider=provider, subject=subject, body=body,
                updated_at=greatest(conn, db_now_ms(), reach_templates.c.updated_at + 1)))

        write(self.engine, work)

    def get(self, name: str) -> StoredTemplate | None:
        query = select(reach_templates).where(reach_templates.c.name == name)
        row = read(self.engine, lambda conn: conn.execute(query).first())
        return None if row is None else StoredTemplate(row.name, row.provider, row.subject, row.body,
                                                       to_ms(row.updated_at, "updated_at"))

    def list(self) -> list[StoredTemplate]:
        query = select(reach_templates).order_by(reach_templates.c.name)
        return [StoredTemplate(r.name, r.provider, r.subject, r.body, to_ms(r.updated_at, "updated_at"))
                for r in read(self.engine, lambda conn: conn.execute(query).all())]

    def create(self, name: str, provider: str, subject: str | None, body: str) -> bool:
        """Insert a new template; False (nothing written) when the name is taken.

        The insert ignores a conflicting name and the row is read back: insert-or-ignore
        row counts are not portable (MySQL reports a found duplicate as one row)."""
        existing = select(reach_templates.c.provider, reach_templates.c.subject, reach_templates.c.body).where(
            reach_templates.c.name == name)

        def work(conn: Connection) -> bool:
            if conn.execute(existing).first() is not None:
                return False
            now = db_statement_now_ms()  # one reading: created_at = updated_at
            conn.execute(insert_ignore(conn, reach_templates, [{
                "name": name, "provider": provider, "subject": subject, "body": body, "created_at": now,
                "updated_at": now}]))
            stored = conn.execute(existing).first()  # a concurrent create of the same name may have won
            return stored is not None and tuple(stored) == (provider, subject, body)

        return write(self.engine, work)

    def update(self, name: str, provider: str, subject: str | None, body: str, expected_updated_at: int) -> bool:
        """Replace a template's content at version ``expected_updated_at`` only; False when it
        is gone or changed since (0 rows: nothing written)."""

        def work(conn: Connection) -> bool:
            return one_row(conn.execute(update(reach_templates).where(
                reach_templates.c.name == name, reach_templates.c.updated_at == expected_updated_at,
            ).values(provider=provider, subject=subject, body=body,
                     updated_at=greatest(conn, db_now_ms(), reach_templates.c.updated_at + 1))))

        return write(self.engine, work)

    def delete(self, name: str, expected_updated_at: int | None = None) -> bool:
        """Delete a template (at version ``expected_updated_at`` when given); False when nothing matched."""
        conditions = [reach_templates.c.name == name]
        if expected_updated_at is not None:
            conditions.append(reach_templates.c.updated_at == expected_updated_at)
        return write(self.engine, lambda conn: one_row(conn.execute(delete(reach_templates).where(*conditions))))
