"""``--hooks module:attr`` / ``HAI_HOOKS``: the application's hooks, or a named error before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scheduler_core.errors import ConfigError
from scheduler_core.runtime.hooks import Hooks, load_hooks

APP = '''
def run(event):
    return "done"

hooks = {"on_task_execute": run}

class Jobs:
    on_task_execute = staticmethod(run)

jobs = Jobs()
nothing = {}
not_callable = {"on_task_execute": 5}
'''


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "hai_test_app.py").write_text(APP)
    (tmp_path / "hai_broken_app.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "hai_test_app"


@pytest.mark.parametrize("attribute", ["hooks", "jobs"])
def test_a_mapping_or_an_object_with_hooks_loads(app_module: str, attribute: str) -> None:
    assert Hooks(load_hooks(f"{app_module}:{attribute}")).on_task_execute is not None


@pytest.mark.parametrize(("spec", "message"), [
    ("hai_test_app", "must be module:attribute"),
    (":hooks", "must be module:attribute"),
    ("hai_no_such_module:hooks", "cannot import 'hai_no_such_module': ModuleNotFoundError"),
    ("hai_broken_app:hooks", "cannot import 'hai_broken_app': RuntimeError: boom at import"),
    ("hai_test_app:missing", "has no attribute 'missing'"),
    ("hai_test_app:nothing", "has none of the hooks"),
    ("", "must be a non-empty string"),
    ("a\nb:c", "must be a single line"),
])
def test_a_bad_spec_is_refused_by_name(app_module: str, spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_hooks(spec, "--hooks")
    assert info.value.field == "--hooks" and message in info.value.message


def test_a_hook_that_is_not_callable_names_the_hook(app_module: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_hooks(f"{app_module}:not_callable")
    assert info.value.field == "hooks.on_task_execute"


def test_the_node_command_refuses_a_bad_hooks_path_before_it_starts(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "webapp.cli", "node", "--hooks", "hai_missing_app:hooks",
                           "--database-url", f"sqlite:///{tmp_path}/never.db"], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert done.returncode == 1 and "--hooks: cannot import 'hai_missing_app'" in done.stderr
    assert not (tmp_path / "never.db").exists()  # nothing was created: the error came first
