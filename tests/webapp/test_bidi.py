"""Text someone typed is isolated from the page's own text, so a right-to-left override (U+202E)
in a name cannot reorder what follows it ("Invoice\u202eexe.txt" shown as "Invoicetxt.exe",
or a status after a task id read backwards). Every page that shows such text is rendered with
U+202E in each typed string (task id, name, description, owner, node id and host, group, user name,
reason, source, idempotency key, audit target), and every piece of text holding U+202E must sit
inside an isolating element: ``<bdi>`` (the ``bdi`` filter), an element with ``dir``, a form
control, or -- in a ``<title>`` or a ``data-confirm`` / ``title`` attribute, where no element can
go -- between U+2068 and U+2069 (the ``fsi`` filter). tests/browser/test_bidi_page.py checks
what Chromium draws."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest
from flask import Flask
from flask.testing import FlaskClient

from scheduler_core import TaskDefinition
from scheduler_core.db.tables import executions
from scheduler_core.store.nodes import NodeRepository
from tests.helpers.journal import db_now, execution_row, insert_rows
from tests.webapp.conftest import Auth
from webapp.node import audit_of, scheduler_of
from webapp.timefmt import bdi, fsi

RLO = "\u202e"
TASK = f"invoice-{RLO}exe.txt"
NAME = f"Invoice {RLO}exe.txt"
OCCURRENCE = f"occ-{RLO}1"
OWNER = f"team-{RLO}gnillib"
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
# Elements whose text is its own box: an override inside cannot reach the page's text.
CONTROLS = {"textarea", "option", "script", "style"}
# Plain-text attributes a person reads; an override there must be between U+2068 and U+2069.
READ_ATTRIBUTES = {"title", "data-confirm", "aria-label", "alt", "placeholder"}


class _Isolation(HTMLParser):
    """Every text and attribute holding U+202E that is not isolated."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []  # (tag, isolates)
        self.bare: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        for name, value in attrs:
            if value and RLO in value and name in READ_ATTRIBUTES and not _between_isolates(value):
                self.bare.append(f"<{tag} {name}={value!r}>")
        classes = (named.get("class") or "").split()
        parent_diff = any(t == "ul" and isolating for t, isolating in self.stack[-2:])  # .diff del / ins: app.css
        isolates = tag in ("bdi", *CONTROLS) or "dir" in named or (tag in ("del", "ins") and parent_diff)
        if tag == "ul":
            isolates = "diff" in classes  # marks the list whose del / ins app.css isolates
        if tag not in VOID:
            self.stack.append((tag, isolates))

    def handle_endtag(self, tag: str) -> None:
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index][0] == tag:
                del self.stack[index:]
                return

    def handle_data(self, data: str) -> None:
        if RLO not in data:
            return
        if self.stack and self.stack[-1][0] == "title":
            if not _between_isolates(data):
                self.bare.append(f"<title>{data!r}")
            return
        if not any(isolating and tag != "ul" for tag, isolating in self.stack):
            self.bare.append(f"{' > '.join(tag for tag, _ in self.stack[-4:])}: {data.strip()!r}")


def _between_isolates(text: str) -> bool:
    """Each U+202E comes after a U+2068 that is not yet closed."""
    depth = 0
    for char in text:
        depth += char == "\u2068"
        depth -= char == "\u2069" and depth > 0
        if char == RLO and depth == 0:
            return False
    return True


def _bare(page: str) -> list[str]:
    parser = _Isolation()
    parser.feed(page)
    return parser.bare


@pytest.fixture
def spoofed(app: Flask, auth: Auth) -> Flask:
    """A task, its journal, a node, a pause and an audit entry, each typed string holding U+202E."""
    scheduler = scheduler_of(app)
    engine = app.extensions["hai_engine"]
    scheduler.register(TaskDefinition(id=TASK, name=NAME, cron="0 2 * * *", description=f"Sends {RLO}fdp.exe",
                                      node_group=f"group-{RLO}x", owner=OWNER))
    row = execution_row(OCCURRENCE, db_now(engine) - 60_000, "failed", TASK)
    row.update(reason=f"broken {RLO}gnihton", source=f"manual:{RLO}admin", idempotency_key=f"key-{RLO}1",
               owner_node=f"node-{RLO}a")
    insert_rows(engine, executions, [row])
    NodeRepository(engine).heartbeat(f"node-{RLO}a", f"host-{RLO}b", 4242, capabilities=["api"],
                                     groups=[f"group-{RLO}x"])
    audit_of(app).record(f"alice-{RLO}bob", "task.trigger", TASK, before={"name": "Old"}, after={"name": NAME},
                         reason=f"because {RLO}sknaht")
    scheduler.pause(TASK, reason=f"deploy {RLO}yrev", by=f"carol-{RLO}dan")
    auth.login()
    return app


PAGES = ("/", "/tasks/", "/tasks/?q=invoice", f"/tasks/view/{quote(TASK)}", f"/tasks/edit/{quote(TASK)}",
         f"/tasks/delete/{quote(TASK)}", f"/tasks/occurrences/{quote(TASK)}", "/runs/", "/executions/",
         f"/executions/view/{quote(OCCURRENCE)}", "/nodes/", "/audit/")


@pytest.mark.parametrize("path", PAGES)
def test_typed_text_is_isolated_on_every_page(spoofed: Flask, client: FlaskClient, path: str) -> None:
    fragment = {"HX-Request": "true"} if path.startswith("/tasks/occurrences/") else {}  # opened directly: the page
    response = client.get(path, headers=fragment)
    assert response.status_code == 200, path
    page = response.get_data(as_text=True)
    assert RLO in page, f"{path} shows none of the typed strings: the test proves nothing there"
    assert _bare(page) == [], path


def test_the_task_detail_isolates_each_typed_string(spoofed: Flask, client: FlaskClient) -> None:
    page = client.get(f"/tasks/view/{quote(TASK)}").get_data(as_text=True)
    assert f"<title>Task \u2068{TASK}\u2069 · hai-scheduler</title>" in page
    for text in (NAME, f"Sends {RLO}fdp.exe", f"deploy {RLO}yrev", OWNER):
        assert str(bdi(text)) in page
    assert f"<bdi>by carol-{RLO}dan</bdi>" in page
    assert f'data-confirm="Disable task {fsi(TASK)}?' in page


def test_the_checker_finds_an_override_outside_an_isolate() -> None:
    assert _bare(f"<p>Paused by {NAME} today</p>") == [f"p: {f'Paused by {NAME} today'!r}"]
    assert _bare(f"<p>Paused by <bdi>{NAME}</bdi> today</p>") == []
    assert _bare(f'<p>By <span dir="auto">{NAME}</span></p><textarea>{NAME}</textarea>') == []
    assert _bare(f"<title>Task {NAME}</title>") and not _bare(f"<title>Task {fsi(NAME)}</title>")
    assert _bare(f'<button data-confirm="Delete {NAME}?">') and not _bare(f'<button data-confirm="{fsi(NAME)}">')
    assert _bare(f"<ul><li><del>{NAME}</del></li></ul>")
    assert not _bare(f'<ul class="diff"><li><del>{NAME}</del></li></ul>')


def test_the_diff_values_are_isolated_by_the_style_sheet() -> None:
    css = (Path(__file__).resolve().parents[2] / "static" / "app.css").read_text()
    assert ".diff del, .diff ins { unicode-bidi: isolate; }" in css
