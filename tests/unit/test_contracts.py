"""The contracts between processes import neither side: the ``contracts`` package imports no project code
but the store's, and the learner, which talks to the gateway only through it, loads none of the
gateway's server stack (FastAPI, aiohttp, the ``gateway`` package) when every one of its modules is
imported. Checked in a fresh interpreter, so what the test session already imported does not count."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.unit.test_import_cycles import ROOT, import_graph

SERVER_STACK = ("fastapi", "aiohttp", "gateway")
LOAD_ALL = """
import importlib, json, pkgutil, sys
package = importlib.import_module(sys.argv[1])
for found in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    importlib.import_module(found.name)
print(json.dumps(sorted({name.partition(".")[0] for name in sys.modules})))
"""


def top_level_modules_loaded_by(package: str) -> set[str]:
    """Every top-level module a fresh interpreter holds after importing all of ``package``'s modules."""
    done = subprocess.run(
        [sys.executable, "-c", LOAD_ALL, package], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_importing_every_learner_module_loads_neither_fastapi_nor_aiohttp_nor_the_gateway():
    loaded = top_level_modules_loaded_by("learner")
    assert "torch" in loaded and "contracts" in loaded, "the walk imported the learner's modules"
    assert loaded.isdisjoint(SERVER_STACK), sorted(loaded & set(SERVER_STACK))


def test_the_contracts_import_no_project_code_but_the_stores():
    graph = import_graph()
    reached = {target for name, targets in graph.items() if name.startswith("contracts") for target in targets}
    assert "store.policies" in reached, "the walk found the contracts' imports"
    assert {target.partition(".")[0] for target in reached} <= {"contracts", "store"}, sorted(reached)


def test_the_contracts_load_none_of_the_server_stack():
    assert top_level_modules_loaded_by("contracts").isdisjoint(SERVER_STACK)
