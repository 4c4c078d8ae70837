"""Every task and template the dashboard accepts is reachable: URLs put the action before the
id (``/tasks/edit/<id>``), so ids like ``new``, ``cron-preview`` or ``x/edit`` name their own
pages; the ids no URL can carry (an empty, ``.`` or ``..`` part between slashes) are refused when
a task or template is saved, by the form and by the library alike. Rows stored before the rule
stay readable. On every database."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from flask import Flask, url_for
from flask.testing import FlaskClient
from sqlalchemy import update
from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from scheduler_core.db.tables import reach_templates, slots, tasks
from scheduler_core.errors import ConfigError, ReachConfigError
from tests.webapp.conftest import Auth, csrf_token
from webapp.node import accounts_of, reach_of, scheduler_of

# Each was accepted before and then opened another page (or none).
ODD_IDS = ("new", "cron-preview", "x/edit", "view/x", "edit", "a b?c#d%e&f=1", "ü/ñ", "...", ".x/y.", "x/occurrences")
UNREACHABLE = ("..", ".", "a//b", "/a", "a/", "a/./b", "a/../b", "/")
TASK_PAGES = ("tasks.detail", "tasks.edit", "tasks.confirm_delete", "tasks.occurrences")


def _admin(app: Flask) -> FlaskClient:
    client = app.test_client()
    assert Auth(client).login().status_code == 302
    return client


def _post(client: FlaskClient, path: str, data: dict[str, Any]) -> Any:
    return client.post(path, data={**data, "csrf_token": csrf_token(client, "/")})


def _task_form(task_id: str) -> dict[str, str]:
    return {"id": task_id, "name": f"Task {task_id}", "cron": "0 3 * * *", "timezone": "UTC", "kind": "hook",
            "retry_max_attempts": "1", "enabled": "1"}


def _urls(app: Flask, endpoints: tuple[str, ...], **values: str) -> dict[str, str]:
    with app.test_request_context():
        return {endpoint: url_for(endpoint, **values) for endpoint in endpoints}


def _text(response: Any) -> str:
    return html.unescape(response.get_data(as_text=True))


def test_odd_task_ids_reach_their_own_pages_and_actions(db_app: Flask) -> None:
    client = _admin(db_app)
    scheduler = scheduler_of(db_app)
    for task_id in ODD_IDS:
        created = _post(client, "/tasks/new", _task_form(task_id))
        assert created.status_code == 303, (task_id, _text(created)[:500])
        urls = _urls(db_app, (*TASK_PAGES, "tasks.disable", "tasks.trigger", "tasks.delete"), task_id=task_id)
        assert created.headers["Location"] == urls["tasks.detail"]
        detail = client.get(urls["tasks.detail"])
        page = _text(detail)
        assert detail.status_code == 200 and f"<code>{task_id}</code>" in page, task_id
        for endpoint in ("tasks.edit", "tasks.confirm_delete", "tasks.disable", "tasks.trigger"):
            assert f'"{urls[endpoint]}"' in page, (task_id, endpoint)  # the links the page shows ...
        for endpoint in ("tasks.edit", "tasks.confirm_delete"):
            shown = client.get(urls[endpoint])  # ... open this task's pages
            assert shown.status_code == 200 and task_id in _text(shown), (task_id, endpoint)
        version = scheduler.task_ops.get(task_id).updated_at
        assert _post(client, urls["tasks.disable"], {"expected_updated_at": version}).status_code == 303
        assert not scheduler.task_ops.get(task_id).enabled, task_id
        assert _post(client, urls["tasks.trigger"], {}).status_code == 303
        [occurrence] = scheduler.task_ops.occurrences(task_id, 5).rows
        # opened directly, the history fragment's address leads to the task's page (test_fragments_direct.py)
        assert occurrence.occurrence_id in _text(client.get(urls["tasks.occurrences"], follow_redirects=True)), task_id
    for task_id in ODD_IDS:  # each action above touched its own task only
        task = scheduler.task_ops.get(task_id)
        version = task.updated_at
        assert _post(client, _urls(db_app, ("tasks.delete",), task_id=task_id)["tasks.delete"],
                     {"expected_updated_at": version}).status_code == 303
    assert scheduler.task_ops.search("").rows == []


@pytest.mark.parametrize("task_id", UNREACHABLE)
def test_ids_no_url_can_carry_are_refused_for_new_tasks(db_app: Flask, task_id: str) -> None:
    client = _admin(db_app)
    response = _post(client, "/tasks/new", _task_form(task_id))
    error = re.search(r'id="id-error">([^<]*)<', _text(response))
    assert response.status_code == 400 and error and "between slashes" in error.group(1), task_id
    with pytest.raises(ConfigError) as refused:
        scheduler_of(db_app).register(TaskDefinition(id=task_id, name="n", cron="0 3 * * *"))
    assert refused.value.field == "id"
    assert scheduler_of(db_app).task_ops.search("").rows == []


def test_tasks_stored_before_the_rule_stay_readable(db_app: Flask) -> None:
    """An id the rule refuses today, stored before it: the node still loads it, and the list shows it."""
    scheduler = scheduler_of(db_app)
    scheduler.register(TaskDefinition(id="old-task", name="Old", cron="0 3 * * *"))
    with db_app.extensions["hai_engine"].begin() as conn:
        conn.execute(update(tasks).where(tasks.c.id == "old-task").values(id="old//task"))
        conn.execute(update(slots).where(slots.c.task_id == "old-task").values(task_id="old//task"))
    assert [task.id for task in scheduler.refresh_tasks()] == ["old//task"]
    assert scheduler.task_ops.get("old//task").name == "Old"
    assert "old//task" in _text(_admin(db_app).get("/tasks/"))
    scheduler.update_task("old//task", name="Still editable")
    scheduler.unregister("old//task")


TEMPLATE_PAGES = ("notifications.template", "notifications.edit_template")


def test_odd_template_names_reach_their_own_pages(db_app: Flask) -> None:
    client = _admin(db_app)
    templates = reach_of(db_app).templates
    for name in ("new", "x/edit", "show/y", "a b?c#d", "ü/ñ"):
        created = _post(client, "/notifications/templates/new", {"name": name, "provider": "log", "body": "Hi {who}"})
        assert created.status_code == 303, (name, _text(created)[:500])
        urls = _urls(db_app, (*TEMPLATE_PAGES, "notifications.delete_template"), name=name)
        assert created.headers["Location"] == urls["notifications.template"]
        for endpoint in TEMPLATE_PAGES:
            page = client.get(urls[endpoint])
            assert page.status_code == 200 and name in _text(page), (name, endpoint)
        stored = templates.stored_one(name)
        assert stored is not None
        deleted = _post(client, urls["notifications.delete_template"], {"expected_updated_at": stored.updated_at})
        assert deleted.status_code == 303 and templates.stored_one(name) is None, name


@pytest.mark.parametrize("name", ("..", "a//b", "a/", "x/./y"))
def test_template_names_no_url_can_carry_are_refused(db_app: Flask, name: str) -> None:
    response = _post(_admin(db_app), "/notifications/templates/new", {"name": name, "provider": "log", "body": "b"})
    assert response.status_code == 400 and "between slashes" in _text(response)
    with pytest.raises(ReachConfigError) as refused:
        reach_of(db_app).templates.save(name, "log", "body")
    assert refused.value.field == "name"
    assert reach_of(db_app).templates.stored() == []


def test_templates_stored_before_the_rule_stay_readable_and_deletable(db_app: Flask) -> None:
    templates = reach_of(db_app).templates
    templates.create("old-tpl", "log", "Hi {who}")
    with db_app.extensions["hai_engine"].begin() as conn:
        conn.execute(update(reach_templates).where(reach_templates.c.name == "old-tpl").values(name="old//tpl"))
    assert [t.name for t in templates.list()] == ["old//tpl"]
    assert templates.preview("old//tpl", {"who": "you"}) == (None, "Hi you")
    templates.delete("old//tpl")
    assert templates.stored() == []


def test_a_user_named_like_a_page_has_its_own_page(app: Flask) -> None:
    """``/users/new`` is the form for a new user; the user ``new`` is managed at ``/users/manage/new``."""
    accounts = accounts_of(app)
    client = _admin(app)
    for name in ("new", "manage", "role"):
        assert accounts.create(name, "viewer", generate_password_hash(f"{name}-password"))
        user = accounts.get(name)
        assert user is not None
        urls = _urls(app, ("users.manage", "users.set_role"), name=name)
        page = _text(client.get(urls["users.manage"]))
        assert f'name="expected_updated_at" value="{user.updated_at}"' in page
        assert f'action="{urls["users.set_role"]}"' in page
        changed = _post(client, urls["users.set_role"], {"role": "operator", "expected_updated_at": user.updated_at})
        assert changed.status_code == 303 and getattr(accounts.get(name), "role", None) == "operator"
