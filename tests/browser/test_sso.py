"""Single sign-on in a real browser: Chromium goes from a dashboard page to the identity provider's
sign-in (the npm ``oidc-provider``, tests/helpers/oidc_provider.py), back to the page it asked for,
and out again through the provider's logout. The dashboard is ``hai-scheduler serve`` configured by
its ``HAI_OIDC_*`` settings, as the README says, so ``serve`` checks the provider's discovery first.
alice's group makes her an operator of the team ``ops``: she lands on a Tasks page of ``ops``'s
tasks only (docs/teams.md)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from scheduler_core import TaskDefinition
from scheduler_core.db import close_engine, create_engine, upgrade
from scheduler_core.runtime.accounts import Accounts
from scheduler_core.store import TaskRepository
from tests.browser.conftest import ADMIN_PASSWORD, Dashboard, Screens, _require_browser, served
from tests.helpers.http_server import RecordingServer
from tests.helpers.oidc_provider import OidcProvider, require_oidc_provider
from tests.helpers.served import free_port


@pytest.fixture(scope="module")
def provider_and_dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OidcProvider, Dashboard]]:
    _require_browser()
    require_oidc_provider()
    folder = tmp_path_factory.mktemp("sso")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with OidcProvider.start(clients=[{"client_id": "dashboard", "client_secret": "browser-secret",
                                      "redirect_uris": [f"{url}/login/sso/callback"],
                                      "post_logout_redirect_uris": [f"{url}/login"]}],
                            users={"alice": {"groups": ["ops"], "email": "alice@example.test", "name": "Alice"},
                                   "carol": {"groups": ["marketing"], "email": "carol@example.test"}}) \
            as provider, RecordingServer() as receiver:
        (folder / "secret").write_text("browser-secret\n")
        database_url = f"sqlite:///{folder}/dashboard.db"
        _two_teams(database_url)
        env = {**os.environ, "HAI_DATABASE_URL": database_url, "HAI_ADMIN_PASSWORD": ADMIN_PASSWORD,
               "HAI_OIDC_ISSUER": provider.issuer, "HAI_OIDC_CLIENT_ID": "dashboard",
               "HAI_OIDC_CLIENT_SECRET_FILE": str(folder / "secret"), "HAI_OIDC_NAME": "Example ID",
               "HAI_OIDC_GROUP_ROLES": "ops=ops:operator", "HAI_PUBLIC_URL": url}
        with served(env, folder, port) as process:
            yield provider, Dashboard(url, database_url, receiver, {}, process)


def _two_teams(database_url: str) -> None:
    """The team ``ops`` (``serve`` refuses a mapping to a team the database lacks) with a task, and
    a task of ``default``."""
    engine = create_engine(database_url)
    try:
        upgrade(engine)
        Accounts(engine).create_team("ops", "Operations")
        for task in (TaskDefinition(id="ops-nightly", name="Ops nightly", cron="0 2 * * *", team="ops"),
                     TaskDefinition(id="billing-ledger", name="Billing ledger", cron="0 3 * * *")):
            TaskRepository(engine).insert(task)
    finally:
        close_engine(engine)


@contextmanager
def _page(browser: Any, viewport: dict[str, int]) -> Iterator[Any]:
    """A fresh browser context's page; script errors and CSP violations fail the test."""
    context = browser.new_context(viewport=viewport)
    context.set_default_timeout(15_000)
    errors: list[str] = []
    page = context.new_page()
    page.on("console", lambda message: errors.append(message.text) if message.type == "error"
            and not message.text.startswith("Failed to load resource") else None)
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"the browser reported errors (CSP violations, script errors): {errors}"


def _sign_in_at_the_provider(page: Any, provider: OidcProvider, who: str) -> None:
    page.wait_for_url(re.compile(re.escape(provider.issuer) + r"/.*"))
    page.locator("input[name=username]").fill(who)
    page.locator("input[name=password]").fill("whatever")
    page.get_by_role("button", name="Sign in").click()


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 900}, {"width": 390, "height": 844}],
                         ids=["desktop", "phone"])
def test_a_person_signs_on_lands_where_they_asked_and_signs_out_at_the_provider_too(
        browser: Any, provider_and_dashboard: tuple[OidcProvider, Dashboard], shot: Screens,
        viewport: dict[str, int]) -> None:
    provider, dashboard = provider_and_dashboard
    with _page(browser, viewport) as page:
        page.goto(dashboard("/tasks/"))
        page.wait_for_url(re.compile(r".*/login\?next=.*"))
        shot(page, "sign-in")
        page.get_by_role("link", name="Sign in with Example ID").click()
        _sign_in_at_the_provider(page, provider, "alice")
        page.wait_for_url(dashboard("/tasks/"))
        assert "alice" in page.content()
        rows = page.locator("table tbody tr").all_inner_texts()
        assert any("ops-nightly" in row for row in rows) and not any("billing-ledger" in row for row in rows)
        shot(page, "signed-on")
        page.get_by_role("button", name="Log out").click()
        page.wait_for_url(re.compile(re.escape(dashboard("/login")) + r".*"))
        assert page.get_by_role("status").inner_text() == "You are signed out."
        shot(page, "signed-out")
        # signed out at the provider too: signing on again asks who you are
        page.get_by_role("link", name="Sign in with Example ID").click()
        page.wait_for_url(re.compile(re.escape(provider.issuer) + r"/.*"))
        assert page.locator("input[name=username]").count() == 1


def test_a_refused_person_can_sign_in_as_someone_else(
        browser: Any, provider_and_dashboard: tuple[OidcProvider, Dashboard], shot: Screens) -> None:
    provider, dashboard = provider_and_dashboard
    with _page(browser, {"width": 390, "height": 844}) as page:
        page.goto(dashboard("/login"))
        page.get_by_role("link", name="Sign in with Example ID").click()
        _sign_in_at_the_provider(page, provider, "carol")
        page.wait_for_url(re.compile(re.escape(dashboard("/login")) + r"$"))  # not left on the callback's address
        assert "grant no role" in page.get_by_role("alert").inner_text()
        assert page.locator("[aria-invalid]").count() == 0  # the password form is not what failed
        shot(page, "refused")
        page.get_by_role("link", name="Sign in as someone else").click()
        _sign_in_at_the_provider(page, provider, "alice")
        page.wait_for_url(dashboard("/"))
        assert "alice" in page.content()
