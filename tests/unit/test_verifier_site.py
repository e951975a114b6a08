"""The verifier's sitecustomize.py (sandboxes/verifier_site.py), run by this Python as a verifier would
run it: the agent's working directory holds modules named like the standard library's and pytest's,
packaging metadata and its own modules. The sandboxes' part (the file read-only in every backend) is
tested in tests/integration/test_verifier_isolation.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandboxes.protocol import SITECUSTOMIZE, VERIFIER_SITE, verifier_env
from sandboxes.verifier_site import WORKSPACE_VARIABLE, Workspace

TAKEOVER = "import os\nos._exit(0)\n"  # a planted module that makes any check pass
CHECK = "import sys\nsys.exit(0 if open('answer.txt').read().strip() == '42' else 1)"
UNITTEST_CHECK = """import unittest


class Answer(unittest.TestCase):
    def test_answer(self):
        self.assertEqual(open("answer.txt").read().strip(), "42")
"""


@pytest.fixture
def work(tmp_path) -> Path:
    """A wrong answer, planted modules and metadata, and the agent's own calc module."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "answer.txt").write_text("41\n")
    for name in ("json.py", "unittest.py", "pytest.py", "own.py"):
        (app / name).write_text(TAKEOVER)
    (app / "calc.py").write_text("def double(x):\n    return 2 * x\n")
    (app / "shapes").mkdir()  # a namespace package (no __init__.py)
    (app / "shapes" / "square.py").write_text("SIDES = 4\n")
    metadata = app / "own-1.0.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text("Metadata-Version: 2.1\nName: own\nVersion: 1.0\n")
    (metadata / "entry_points.txt").write_text("[pytest11]\nown = own\n")
    return app


def python(tmp_path: Path, cwd: Path, *args: str, workspace: Path | str | None = None, site: bool = True, also=""):
    """This Python run in `cwd` with the verifier's environment for the working directory `workspace`
    (default `cwd`), its PYTHONPATH our folder then `also`; with `site` False, without our folder."""
    folder = tmp_path / "verifier-python"
    folder.mkdir(exist_ok=True)
    shutil.copy(VERIFIER_SITE, folder / SITECUSTOMIZE)
    env = verifier_env({"PATH": os.environ["PATH"]}, str(tmp_path), str(workspace or cwd), f"{folder}{also}")
    if not site:
        env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", WORKSPACE_VARIABLE)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_a_standard_library_name_in_the_working_directory_does_not_take_over_python_c(tmp_path, work):
    verifier = f"import json\n{CHECK}"
    assert python(tmp_path, work, "-c", verifier, site=False).returncode == 0  # the attack, unguarded
    assert python(tmp_path, work, "-c", verifier).returncode == 1


def test_a_planted_module_does_not_take_over_python_m(tmp_path, work):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_answer.py").write_text(UNITTEST_CHECK)
    for runner in (["unittest", "discover", "-s", str(tests)], ["pytest", "-q", "-p", "no:cacheprovider", str(tests)]):
        assert python(tmp_path, work, "-m", *runner, site=False).returncode == 0  # the attack, unguarded
        assert python(tmp_path, work, "-m", *runner).returncode == 1


def test_packaging_metadata_in_the_working_directory_is_not_seen(tmp_path, work):
    """A *.dist-info there would register a pytest plugin (own.py) before any test runs."""
    listed = "import importlib.metadata as m; print(sorted(d.metadata['Name'] for d in m.distributions()))"
    assert "'own'" in python(tmp_path, work, "-c", listed, site=False).stdout
    assert "'own'" not in python(tmp_path, work, "-c", listed).stdout


def test_the_agents_own_modules_import_after_everything_else(tmp_path, work):
    own = "from calc import double; from shapes.square import SIDES; import json; print(double(SIDES), json.dumps(1))"
    ran = python(tmp_path, work, "-c", own)
    assert (ran.returncode, ran.stdout) == (0, "8 1\n"), ran.stderr
    ran = python(tmp_path, work, "-c", "import calc, sys; print(sys.path[0] == '', calc.double(2))")
    assert ran.stdout == "False 4\n", ran.stderr  # the cwd is off sys.path and still found


def test_a_test_that_puts_the_working_directory_first_still_gets_the_standard_library(tmp_path, work):
    first = f"import sys; sys.path.insert(0, {str(work)!r}); from calc import double; import json; print('ok')"
    assert python(tmp_path, work, "-c", first).stdout == "ok\n"


def test_a_script_outside_the_working_directory_keeps_its_folder_first(tmp_path, work):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "helper.py").write_text("VALUE = 3\n")
    (tests / "check.py").write_text("import sys, helper\nprint(sys.path[0], helper.VALUE)\n")
    ran = python(tmp_path, work, str(tests / "check.py"))
    assert ran.stdout == f"{tests} 3\n", ran.stderr


def test_the_sitecustomize_it_hides_still_runs(tmp_path, work):
    hidden = tmp_path / "image-site"
    hidden.mkdir()
    (hidden / SITECUSTOMIZE).write_text("import builtins\nbuiltins.IMAGE_SITE = 1\n")
    (work / SITECUSTOMIZE).write_text(TAKEOVER)  # never the agent's
    ran = python(tmp_path, work, "-c", "print(IMAGE_SITE)", also=f":{hidden}")
    assert ran.stdout == "1\n", ran.stderr


def test_the_working_directory_holds_its_own_entries_only(tmp_path):
    (tmp_path / "app" / "sub").mkdir(parents=True)
    (tmp_path / "app2").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "app")
    workspace = Workspace(str(tmp_path / "app"))
    held = {p: workspace.holds(str(tmp_path / p)) for p in ("app", "app/sub", "link", "app2", ".")}
    assert held == {"app": True, "app/sub": True, "link": True, "app2": False, ".": False}
    assert workspace.holds(b"/app") is False  # PathFinder skips entries that are not text


def test_the_verifiers_python_is_told_the_working_directory_and_the_guard_alone():
    env = verifier_env({"PYTHONPATH": "/app", WORKSPACE_VARIABLE: "/elsewhere"}, "/home", "/app", "/run/site")
    assert (env["PYTHONPATH"], env[WORKSPACE_VARIABLE]) == ("/run/site", "/app")


def test_a_working_directory_of_root_keeps_pythons_own_order(tmp_path, work):
    """An image whose WORKDIR is / (graded in the agent's sandbox): nothing lies outside it to prefer."""
    assert Workspace("/").holds("/usr/lib/python3") is False
    ran = python(tmp_path, work, "-c", "from calc import double; print(double(1))", workspace="/")
    assert ran.stdout == "2\n", ran.stderr
