"""Every code block of README.md is exercised: python blocks compile, the runnable ones run end to
end on a temporary SQLite database, shell blocks are run or skipped for a reason stated here, and
the command-line synopsis names only commands and options the parser has."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler_core import TaskDefinition

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
# Shell blocks not run here, and why.
SHELL_SKIPS = {
    "./scripts/run": "serves until stopped; tests/webapp/test_processes.py runs the first start it makes",
    "./scripts/test": "runs this suite itself",
    "export HAI_DATABASE_URL='postgresql://hai:secret@db-a:5432,db-b:5432/scheduler?target_session_attrs=read-write'\n"
    "hai-scheduler db status     # shows every host, the replication it sees, and warns on asynchronous":
        "names a cluster's hosts; tests/integration/test_cluster_url.py runs db status on a cluster URL",
    "export HAI_DATABASE_URL='mysql://hai:secret@galera-2:3306/scheduler'   # this node's Galera node\n"
    "hai-scheduler db status     # \"galera\": the node's name, Primary or not, cluster size, sync_wait":
        "names a Galera node; tests/galera/test_settings.py runs db status on one of a real cluster",
    "cd tests/helpers/oidc && npm ci --no-audit --no-fund && node provider.mjs example.json":
        "serves until stopped; tests/helpers/oidc_provider.py starts the same provider for the sign-on tests, and "
        "tests/unit/test_readme.py checks example.json against the command below",
    "./scripts/setup && .venv/bin/hai-scheduler teams create ops --name Operations\n"
    "HAI_OIDC_ISSUER=http://127.0.0.1:9400 HAI_OIDC_CLIENT_ID=hai-dashboard HAI_OIDC_CLIENT_SECRET=example-secret \\\n"
    "  HAI_OIDC_GROUP_ROLES='ops=ops:operator, platform=*:admin' HAI_OIDC_NAME='the test provider' ./scripts/run":
        "serves until stopped; tests/browser/test_sso.py runs serve with such settings against the test provider",
}
# Python blocks that need servers (SMTP, SMS, a webhook receiver) are compiled only.
RUNNABLE = ("scheduler = Scheduler(", "upgrade(engine)")


def _blocks(language: str) -> list[tuple[int, str]]:
    """(line number, code) of every fenced block in ``language`` ("" = plain text)."""
    return [(README.count("\n", 0, found.start()) + 1, found.group(2)) for found in FENCE.finditer(README)
            if found.group(1) == language]


def test_blocks_are_python_shell_or_plain_text() -> None:
    assert {found.group(1) for found in FENCE.finditer(README)} <= {"python", "sh", ""}
    assert len(_blocks("python")) >= 4 and README.count("```") % 2 == 0


@pytest.mark.parametrize(("line", "code"), _blocks("python"), ids=lambda value: str(value)[:12])
def test_every_python_block_compiles(line: int, code: str) -> None:
    compile(code, f"README.md:{line}", "exec")


def test_every_shell_block_is_run_or_skipped_for_a_stated_reason() -> None:
    for line, code in _blocks("sh"):
        assert code.strip() in SHELL_SKIPS, f"README.md:{line}: a new shell block: run it here or say why not"


@pytest.mark.parametrize("marker", RUNNABLE)
def test_the_runnable_examples_run_end_to_end(marker: str, tmp_path: Path) -> None:
    """As written, in a fresh directory: ``sqlite:///scheduler.db`` is a file in that directory."""
    (code,) = [code for _, code in _blocks("python") if marker in code]
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "scheduler.db").is_file()
    if "Scheduler(" in marker:
        assert re.fullmatch(r"success [0-9a-f-]{36} persisted\n", done.stdout), done.stdout


def test_the_handler_examples_are_valid_tasks() -> None:
    (code,) = [code for _, code in _blocks("python") if '"kind": "python"' in code]
    tasks = [eval(compile(ast.Expression(node.value), "README.md", "eval"), {"TaskDefinition": TaskDefinition})
             for node in ast.parse(code).body if isinstance(node, ast.Expr)]
    assert [task.id for task in tasks] == ["invoice-sync", "cleanup", "nightly-report"]
    source = tasks[1].handler["code"] if isinstance(tasks[1].handler, dict) else tasks[1].handler.code
    compile(source, "cleanup", "exec")  # the code string itself is Python


def _help(words: list[str]) -> str:
    from webapp.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main([*words, "--help"])
    assert done.value.code == 0
    return out.getvalue()


def test_the_command_line_synopsis_matches_the_parser() -> None:
    (synopsis,) = [code for _, code in _blocks("") if code.startswith("hai-scheduler serve")]
    lines = [line for line in synopsis.splitlines() if line.startswith("hai-scheduler ")]
    assert len(lines) == 10  # serve, node, create-user, create-token, db x2, tasks x4
    for line in lines:
        words = line.split()[1:]
        command = words[:2] if words[0] in ("db", "tasks") else words[:1]
        text = _help(command)
        for option in re.findall(r"--[a-z-]+", line):
            assert option in text, f"{' '.join(command)} has no {option}"


def test_the_task_file_field_list_is_every_declared_field() -> None:
    """README's "Tasks as code" names the fields a task file takes: exactly the declared ones
    (a field added to TaskDefinition and left out of the README fails here)."""
    from scheduler_core.runtime.task_files import FILE_FIELDS

    listed = re.search(r"Each entry has the fields of `TaskDefinition` a user declares \((.*?)\)", README, re.DOTALL)
    assert listed, "the README's task-file field list is gone"
    assert re.findall(r"`(\w+)`", listed.group(1)) == list(FILE_FIELDS)


def test_the_test_providers_example_matches_the_sign_on_walkthrough() -> None:
    """The README's walk-through starts tests/helpers/oidc/example.json and the dashboard at its default
    address with these settings: they must agree (issuer, client, secret, redirect URIs, the users' groups)."""
    example = json.loads((ROOT / "tests/helpers/oidc/example.json").read_text())
    (client,) = example["clients"]
    command = next(code for code in SHELL_SKIPS if "HAI_OIDC_ISSUER=" in code)
    assert "teams create ops " in command and "ops=ops:operator" in command  # the team made before it is named
    assert f"HAI_OIDC_ISSUER=http://127.0.0.1:{example['port']} " in command
    assert f"HAI_OIDC_CLIENT_ID={client['client_id']} " in command
    assert f"HAI_OIDC_CLIENT_SECRET={client['client_secret']} " in command
    assert client["redirect_uris"] == ["http://127.0.0.1:8000/login/sso/callback"]
    assert client["post_logout_redirect_uris"] == ["http://127.0.0.1:8000/login"]
    assert {name: user["groups"] for name, user in example["users"].items()} == {
        "alice": ["ops"], "bob": ["platform"], "carol": ["marketing"]}
    assert "127.0.0.1:8000" in README and "HAI_BIND" in README  # the default address the URIs name
