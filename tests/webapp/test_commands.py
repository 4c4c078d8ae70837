"""The real ``hai-scheduler`` commands refuse bad settings with one line before they bind, connect
or create anything; ``create-user`` and ``db status`` say what they did (real processes, real
SQLite files)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scheduler_core.db import close_engine, create_engine
from scheduler_core.runtime.accounts import Accounts
from scheduler_core.store.nodes import NodeRepository
from tests.helpers.served import free_port

pytestmark = pytest.mark.slow


def _environ(**settings: str) -> dict[str, str]:
    """This process's environment without any HAI_ setting but the test's own."""
    kept = {name: value for name, value in os.environ.items()
            if not name.startswith("HAI_") or name.startswith("HAI_TEST")}
    return {**kept, **settings}


def _run(args: list[str], cwd: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webapp.cli", *args], cwd=cwd, env=_environ(**settings),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          start_new_session=True)  # no controlling terminal: nothing can prompt


def _one_line_error(done: subprocess.CompletedProcess[str], field: str) -> str:
    assert done.returncode == 1, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr[-3000:]
    assert done.stderr.startswith("error: hai:") and f" {field}: " in done.stderr, done.stderr
    return done.stderr


SMTP_WITHOUT_HOST = {"providers": [{"name": "mail", "type": "smtp"}]}
SERVE_REFUSES = [
    (["--bind", ""], {}, "--bind"),
    (["--bind", ":8000"], {}, "--bind"),  # an empty host would listen on every interface
    (["--bind", "garbage"], {}, "--bind"),
    (["--bind", "127.0.0.1:99999"], {}, "--bind"),
    (["--bind", "no-such-host.invalid:8000"], {}, "--bind"),
    (["--workers", "0"], {}, "--workers"),
    ([], {"HAI_BIND": ":8000"}, "HAI_BIND"),
    ([], {"HAI_WORKERS": "abc"}, "HAI_WORKERS"),
    ([], {"HAI_THREADS": "0"}, "HAI_THREADS"),
    ([], {"HAI_DATABASE_URL": "bogus"}, "HAI_DATABASE_URL"),
    ([], {"HAI_DATABASE_POOL_SIZE": "many"}, "HAI_DATABASE_POOL_SIZE"),
    ([], {"HAI_ADMIN_PASSWORD": "x"}, "HAI_ADMIN_PASSWORD"),
    ([], {"HAI_HOOKS": "hai_no_such_module:hooks"}, "HAI_HOOKS"),
    ([], {"HAI_NODE_GROUPS": "ok,tab\there"}, "HAI_NODE_GROUPS"),
    ([], {"HAI_REACH_CONFIG": "{conf}/smtp.json"}, "HAI_REACH_CONFIG"),
    ([], {"HAI_CONFIG_FILE": "{conf}/database.json"}, "HAI_CONFIG_FILE.DATABASE_URL"),
    ([], {"HAI_COOKIE_SECURE": "maybe"}, "HAI_COOKIE_SECURE"),
    ([], {"HAI_ENV": "prod"}, "HAI_ENV"),
    ([], {"HAI_TEST_DB_CLOCK_OFFSET_MS": "abc"}, "HAI_TEST_DB_CLOCK_OFFSET_MS"),
    ([], {"HAI_TEST_DB_CLOCK_OFFSET_MS": "5_000"}, "HAI_TEST_DB_CLOCK_OFFSET_MS"),
    ([], {"HAI_ENV": "production"}, "HAI_DATABASE_URL"),  # SQLite, the default, is refused in production
    ([], {"HAI_LOCAL_LOGIN": "nah"}, "HAI_LOCAL_LOGIN"),
    ([], {"HAI_OIDC_CLIENT_ID": "dashboard"}, "HAI_OIDC_CLIENT_ID"),  # sign-on settings without an issuer
    ([], {"HAI_OIDC_ISSUER": "http://127.0.0.1:9", "HAI_OIDC_CLIENT_ID": "dashboard", "HAI_OIDC_CLIENT_SECRET": "s",
          "HAI_OIDC_GROUP_ROLES": "ops=default:operator"}, "HAI_OIDC_ISSUER"),  # no discovery document there
    ([], {"HAI_OIDC_ISSUER": "https://id.example.test", "HAI_OIDC_CLIENT_ID": "dashboard",
          "HAI_OIDC_CLIENT_SECRET": "s", "HAI_OIDC_GROUP_ROLES": "ops=Payments:operator"}, "HAI_OIDC_GROUP_ROLES"),
]


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "smtp.json").write_text(json.dumps(SMTP_WITHOUT_HOST))
    (folder / "database.json").write_text(json.dumps({"DATABASE_URL": "sqlite:///other.db"}))
    return folder


@pytest.mark.parametrize(("args", "settings", "field"), SERVE_REFUSES)
def test_serve_refuses_a_bad_setting_before_it_binds(args: list[str], settings: dict[str, str], field: str,
                                                     tmp_path: Path, conf: Path) -> None:
    if "--bind" not in args and field != "HAI_BIND":
        args = [*args, "--bind", f"127.0.0.1:{free_port()}"]
    values = {name: value.replace("{conf}", str(conf)) for name, value in settings.items()}
    message = _one_line_error(_run(["serve", *args], tmp_path, **values), field)
    if field in ("--bind", "HAI_BIND"):
        assert "HOST:PORT" in message
    assert [path.name for path in tmp_path.iterdir()] == ["conf"], "something was created"


def test_serve_refuses_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        message = _one_line_error(_run(["serve", "--bind", f"127.0.0.1:{port}"], tmp_path), "--bind")
    assert "HOST:PORT" in message and not list(tmp_path.iterdir())


@pytest.mark.parametrize(("args", "settings", "field"), [
    (["node"], {"HAI_DATABASE_URL": "bogus"}, "HAI_DATABASE_URL"),
    (["node", "--group", "a\tb"], {}, "--group"),
    (["node"], {"HAI_TEST_DB_CLOCK_OFFSET_MS": "abc"}, "HAI_TEST_DB_CLOCK_OFFSET_MS"),
    (["node"], {"HAI_TEST_DB_CLOCK_OFFSET_MS": "60000", "HAI_ENV": "production",
                "HAI_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}, "HAI_TEST_DB_CLOCK_OFFSET_MS"),
    (["db", "upgrade"], {"HAI_DATABASE_POOL_SIZE": "0"}, "HAI_DATABASE_POOL_SIZE"),
    (["db", "status"], {"HAI_THREADS": "lots"}, "HAI_THREADS"),
    (["create-user", "bob", "--role", "viewer"], {"HAI_DATABASE_URL": "bogus", "HAI_NEW_PASSWORD": "long enough"},
     "HAI_DATABASE_URL"),
])
def test_node_db_and_create_user_refuse_bad_settings_too(args: list[str], settings: dict[str, str], field: str,
                                                         tmp_path: Path) -> None:
    _one_line_error(_run(args, tmp_path, **settings), field)
    assert not list(tmp_path.iterdir()), "something was created"


def test_a_standalone_node_reads_the_test_clock_offset_as_the_dashboard_does(tmp_path: Path) -> None:
    """``node`` applies HAI_TEST_DB_CLOCK_OFFSET_MS as each dashboard worker does: a test's nodes
    and dashboard read one database clock (its heartbeat is a day ahead of SQLite's real clock)."""
    url = f"sqlite:///{tmp_path}/offset.db"
    environ = _environ(HAI_DATABASE_URL=url, HAI_TEST_DB_CLOCK_OFFSET_MS="86400000", PYTHONFAULTHANDLER="1")
    node = subprocess.Popen([sys.executable, "-m", "webapp.cli", "node", "--node-id", "ahead"], cwd=tmp_path,
                            env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    engine = create_engine(url)
    try:
        assert node.stdout is not None and "running" in node.stdout.readline(), node.communicate()[1][-3000:]
        deadline = time.monotonic() + 30
        while not (seen := NodeRepository(engine).alive(10 * 86_400_000)[1]):
            assert time.monotonic() < deadline, "the node wrote no heartbeat"
            time.sleep(0.1)
        assert seen[0].last_seen_at - time.time() * 1000 > 23 * 3_600_000, seen
    finally:
        close_engine(engine)
        # stopped, then resumed to be stopped (as a supervisor does): the SIGTERM may land on
        # another thread than the main one (scheduler_core/process_stop.py), and still stops it
        node.send_signal(signal.SIGSTOP)
        time.sleep(0.1)
        node.send_signal(signal.SIGCONT)
        node.send_signal(signal.SIGTERM)
        try:
            _, err = node.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # say where it hangs: faulthandler dumps every thread on SIGABRT
            node.send_signal(signal.SIGABRT)
            _, err = node.communicate(timeout=30)
            raise AssertionError(f"the node did not stop within 60 s of SIGTERM:\n{err[-6000:]}") from None
    assert node.returncode == 0, err[-3000:]


def test_a_flag_beats_a_bad_variable_in_every_process(tmp_path: Path) -> None:
    """``serve --bind`` with a bad HAI_BIND serves: gunicorn's master reads the settings too, and
    gets the ones serve chose."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "webapp.cli", "serve", "--bind", f"127.0.0.1:{port}",
                               "--workers", "1"], cwd=tmp_path, env=_environ(HAI_BIND=":1", HAI_WORKERS="0"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert server.poll() is None, server.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "serve did not listen"
            time.sleep(0.2)
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=60)
    assert server.returncode == 0, err[-3000:]


def test_help_works_whatever_the_environment(tmp_path: Path) -> None:
    for args in (["--help"], ["serve", "--help"], ["node", "--help"]):
        done = _run(args, tmp_path, HAI_WORKERS="abc", HAI_BIND="garbage")
        assert done.returncode == 0 and "usage: hai-scheduler" in done.stdout, done.stderr


def test_db_status_never_creates_a_database(tmp_path: Path) -> None:
    done = _run(["db", "status"], tmp_path)
    assert done.returncode == 4 and done.stdout.startswith("no database: "), (done.stdout, done.stderr)
    assert str(tmp_path / "scheduler.db") in done.stdout
    elsewhere = _run(["db", "status", "--database-url", f"sqlite:///{tmp_path}/sub/x.db"], tmp_path)
    assert elsewhere.returncode == 4 and not list(tmp_path.iterdir())
    assert _run(["db", "upgrade"], tmp_path).returncode == 0
    status = _run(["db", "status"], tmp_path)
    assert status.returncode == 0 and json.loads(status.stdout)["schema"]["up_to_date"] is True, status.stderr


def test_a_misspelt_setting_is_named_before_the_command_acts(tmp_path: Path) -> None:
    """The command still does what it did (the name is ignored), but says which name it ignored
    and what it resembles, first: here it is why production refuses the default SQLite."""
    warning = "warning: HAI_DATABSE_URL is not a setting and is ignored: did you mean HAI_DATABASE_URL?\n"
    done = _run(["db", "status"], tmp_path, HAI_DATABSE_URL="postgresql://postgres@127.0.0.1/test")
    assert (done.returncode, done.stderr) == (4, warning), (done.stdout, done.stderr)
    refused = _run(["db", "status"], tmp_path, HAI_DATABSE_URL="postgresql://postgres@127.0.0.1/test",
                   HAI_ENV="production")
    assert refused.returncode == 1 and refused.stderr.startswith(warning), refused.stderr
    assert refused.stderr.splitlines()[1].startswith("error: hai:reldb:012 HAI_DATABASE_URL: "), refused.stderr
    file = tmp_path / "dashboard.json"
    file.write_text(json.dumps({"ADMIN_PASWORD": "long enough"}))
    typo = _run(["db", "status"], tmp_path, HAI_CONFIG_FILE=str(file))
    assert typo.stderr == ("warning: HAI_CONFIG_FILE.ADMIN_PASWORD is not a setting and is ignored: "
                           "did you mean ADMIN_PASSWORD?\n"), typo.stderr
    assert not (tmp_path / "scheduler.db").exists()


def _user(url: str, name: str) -> tuple[str, str]:
    engine = create_engine(url)
    try:
        user = Accounts(engine).get(name)
    finally:
        close_engine(engine)
    assert user is not None
    return user.role, user.password_hash


def test_create_user_reset_with_a_role_changes_the_role_too(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/users.db"
    created = _run(["create-user", "bob", "--role", "viewer"], tmp_path, HAI_DATABASE_URL=url,
                   HAI_NEW_PASSWORD="bob password 1")
    assert created.returncode == 0 and created.stdout == "user 'bob' created (viewer)\n", created.stderr
    reset = _run(["create-user", "bob", "--role", "admin", "--reset"], tmp_path, HAI_DATABASE_URL=url,
                 HAI_NEW_PASSWORD="bob password 2")
    assert reset.returncode == 0, reset.stderr
    assert reset.stdout == "user 'bob': password reset, role viewer -> admin\n"
    role, hashed = _user(url, "bob")
    assert role == "admin"
    # bob is now the only admin: demoting him is refused, and his password stays as it was
    refused = _run(["create-user", "bob", "--role", "viewer", "--reset"], tmp_path, HAI_DATABASE_URL=url,
                   HAI_NEW_PASSWORD="bob password 3")
    assert "last enabled admin" in _one_line_error(refused, "role")
    assert _user(url, "bob") == ("admin", hashed)
    missing = _run(["create-user", "nobody", "--role", "viewer", "--reset"], tmp_path, HAI_DATABASE_URL=url,
                   HAI_NEW_PASSWORD="long enough")
    assert "no user 'nobody'" in _one_line_error(missing, "name")


def test_create_user_without_a_terminal_or_a_password_says_so(tmp_path: Path) -> None:
    done = _run(["create-user", "bob", "--role", "viewer"], tmp_path)
    assert "no terminal" in _one_line_error(done, "HAI_NEW_PASSWORD")
    assert not list(tmp_path.iterdir())


def test_create_user_messages_name_the_field_once(tmp_path: Path) -> None:
    short = _run(["create-user", "bob", "--role", "viewer"], tmp_path, HAI_NEW_PASSWORD="short")
    assert short.stderr == "error: hai:scheduler:012 HAI_NEW_PASSWORD: must have at least 8 characters\n"
    bad_name = _run(["create-user", "bad name!", "--role", "viewer"], tmp_path, HAI_NEW_PASSWORD="long enough")
    assert bad_name.stderr.startswith("error: hai:scheduler:012 name: must be ") and "name: name" not in bad_name.stderr
    assert not list(tmp_path.iterdir())


def test_create_user_reset_gives_a_team_only_user_a_global_role_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/users.db"
    assert _run(["create-user", "tia", "--role", "viewer"], tmp_path, HAI_DATABASE_URL=url,
                HAI_NEW_PASSWORD="tia password 1").returncode == 0
    engine = create_engine(url)
    try:
        accounts = Accounts(engine)
        accounts.set_role("tia", None, accounts.get("tia").updated_at)  # a team role only, as migration 0025 leaves
    finally:
        close_engine(engine)
    reset = _run(["create-user", "tia", "--role", "operator", "--reset"], tmp_path, HAI_DATABASE_URL=url,
                 HAI_NEW_PASSWORD="tia password 2")
    assert reset.stdout == "user 'tia': password reset, role none -> operator\n", reset.stderr
    assert _user(url, "tia")[0] == "operator"


def test_teams_are_created_and_listed_and_a_bad_id_is_named(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/teams.db"
    made = _run(["teams", "create", "payments", "--name", "Payments"], tmp_path, HAI_DATABASE_URL=url)
    assert (made.returncode, made.stdout.strip()) == (0, "team 'payments' created (Payments)"), made.stderr
    again = _run(["teams", "create", "payments"], tmp_path, HAI_DATABASE_URL=url)
    assert again.returncode == 1 and "team: a team 'payments' exists already" in again.stderr
    bad = _run(["teams", "create", "Pay ments"], tmp_path, HAI_DATABASE_URL=url)
    assert bad.returncode == 1 and "team: must be a team id" in _one_line_error(bad, "team")
    listed = _run(["teams", "list"], tmp_path, HAI_DATABASE_URL=url)
    assert listed.stdout.splitlines() == ["default\tDefault", "payments\tPayments"]
    renamed = _run(["teams", "rename", "payments", "Payments & Billing"], tmp_path, HAI_DATABASE_URL=url)
    assert renamed.stdout.strip() == "team 'payments' renamed (Payments & Billing)", renamed.stderr
    assert "team: names no team here: 'nowhere'" in _one_line_error(
        _run(["teams", "rename", "nowhere", "X"], tmp_path, HAI_DATABASE_URL=url), "team")
    assert "default is every installation's team" in _one_line_error(
        _run(["teams", "delete", "default"], tmp_path, HAI_DATABASE_URL=url), "team")
    engine = create_engine(url)
    try:
        accounts = Accounts(engine)
        accounts.create("pat", "viewer", "x")
        accounts.set_grants("pat", {"payments": "operator"}, accounts.get("pat").updated_at)
        from scheduler_core import TaskDefinition
        from scheduler_core.store import TaskRepository
        TaskRepository(engine).insert(TaskDefinition(id="ledger", name="Ledger", cron="0 1 * * *", team="payments"))
        refused = _run(["teams", "delete", "payments"], tmp_path, HAI_DATABASE_URL=url)
        assert "'payments' still has 1 task(s)" in _one_line_error(refused, "team")
        TaskRepository(engine).delete("ledger")
        gone = _run(["teams", "delete", "payments"], tmp_path, HAI_DATABASE_URL=url)
        assert gone.stdout.strip() == "team 'payments' deleted (1 role(s) in it removed)", gone.stderr
        assert accounts.grants("pat") == {} and accounts.teams() == ["default"]
    finally:
        close_engine(engine)


def test_serve_names_a_mapped_team_the_dashboard_does_not_have(tmp_path: Path) -> None:
    """HAI_OIDC_GROUP_ROLES is read before the database; that its teams exist is checked against it."""
    from scheduler_core.db import upgrade
    from scheduler_core.errors import ConfigError
    from webapp.cli import _check_mapped_teams

    engine = create_engine(f"sqlite:///{tmp_path}/mapped.db")
    try:
        _check_mapped_teams(engine, ["payments"])  # no schema yet: the workers migrate, sign-on refuses
        upgrade(engine)
        with pytest.raises(ConfigError) as caught:
            _check_mapped_teams(engine, ["default", "payments"])
        assert caught.value.field == "HAI_OIDC_GROUP_ROLES" and "does not have: payments" in caught.value.message
        Accounts(engine).create_team("payments")
        _check_mapped_teams(engine, ["default", "payments"])
    finally:
        close_engine(engine)
