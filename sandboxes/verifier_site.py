"""The verifier's Python: nothing the agent left in its working directory stands in for a module from
outside it (the standard library, site-packages, pytest, unittest), and the agent's own modules still
import (``from calc import double`` in /app).

Python puts a folder first on sys.path, before the standard library: the current directory for
``python3 -c``, ``python3 -m`` and standard input, the script's folder for a script. So ``python3 -m
pytest`` in /app would import /app/pytest.py, and ``python3 -c "import json"`` /app/json.py. This file
is copied into the verifier's sandbox as ``sitecustomize.py``, alone in a read-only folder that the
verifier's PYTHONPATH names, with the working directory in ``$HARNESSRL_WORKSPACE``
(`sandboxes.protocol.verifier_env`); every Python 3.5+ the verifier starts runs it before its
``-c``/``-m``/script and then:

- a finder placed before PathFinder looks for each top-level module in the sys.path entries outside
  the working directory first, and in those inside it only when no other has the module, whoever put
  them on sys.path (Python, a test's ``sys.path.insert(0, "/app")``);
- on the first import after start-up (Python adds its first entry after site has run), that first
  entry is taken off sys.path when it lies in the working directory and searched last, by a finder
  that reports no packaging metadata: a ``*.dist-info`` the agent left there (a pytest plugin's entry
  point) is not seen;
- the sitecustomize this one hides (Debian's, a virtualenv's) runs first.

Standard library only, no imports of ours, and it parses under Python 2 too (where it does nothing).
"""

import os
import sys

WORKSPACE_VARIABLE = "HARNESSRL_WORKSPACE"


class Workspace:
    """The agent's working directory, symbolic links resolved, and which sys.path entries lie in it."""

    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.known = {}  # absolute entry -> inside; relative ones ('' is the cwd) follow the cwd

    def holds(self, entry):
        if self.root == "/" or not isinstance(entry, str):
            return False  # "/": every module is in it, no outside to prefer; PathFinder skips non-text
        if entry in self.known:
            return self.known[entry]
        try:
            path = os.path.realpath(entry or os.curdir)
        except OSError:  # the current directory is gone: nothing can be imported from it
            return True
        inside = path == self.root or path.startswith(self.root.rstrip("/") + "/")
        if os.path.isabs(entry):
            self.known[entry] = inside
        return inside


class OutsideFirst:
    """Before PathFinder: a top-level module from the sys.path entries outside the workspace, when one
    of them has it; else the usual search goes on."""

    def __init__(self, workspace, path_finder):
        self.workspace, self.path_finder = workspace, path_finder
        # sys.path before Python adds its first entry; None once settled, or when it adds none (-P)
        self.startup = None if getattr(sys.flags, "safe_path", False) else list(sys.path)

    def find_spec(self, name, path=None, target=None):
        if self.startup is not None:
            self.settle()
        if path is not None:
            return None  # a submodule: its package's own __path__ says where
        outside = [entry for entry in sys.path if not self.workspace.holds(entry)]
        if len(outside) == len(sys.path):
            return None  # nothing of the workspace on sys.path: the usual order is safe
        spec = self.path_finder.find_spec(name, outside, target)
        if spec is not None and spec.loader is None and spec.submodule_search_locations is not None:
            # a namespace package recomputes its portions from sys.path later: keep the outside ones
            spec.submodule_search_locations = list(spec.submodule_search_locations)
        return spec

    def settle(self):
        """Python's first sys.path entry, once it is there: searched last when it lies in the workspace."""
        if sys.path == self.startup:
            return  # not added yet
        if sys.path[1:] == self.startup and self.workspace.holds(sys.path[0]):
            folder = os.path.realpath(sys.path.pop(0) or os.curdir)
            sys.meta_path.append(WorkspaceLast(folder, self.path_finder))
        self.startup = None


class WorkspaceLast:
    """After every other finder: a top-level module of Python's first entry, taken off sys.path. It has
    no find_distributions, so importlib.metadata does not look there."""

    def __init__(self, folder, path_finder):
        self.folder, self.path_finder = folder, path_finder

    def find_spec(self, name, path=None, target=None):
        if path is not None:
            return None
        return self.path_finder.find_spec(name, [self.folder], target)


def run_hidden_sitecustomize(workspace, path_finder):
    """The sitecustomize next on sys.path after this one (never one in the workspace), run as site
    would: an error in it is reported and start-up goes on."""
    import importlib.util

    here = os.path.dirname(os.path.realpath(__file__))
    rest = [e for e in sys.path if os.path.realpath(e or os.curdir) != here and not workspace.holds(e)]
    spec = path_finder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except Exception as exc:  # noqa: BLE001 - as site.py reports a failing sitecustomize
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n")
        sys.stderr.write(type(exc).__name__ + ": " + str(exc) + "\n")


def install(root):
    """The two finders, around PathFinder on sys.meta_path, for the working directory `root`."""
    from importlib.machinery import PathFinder

    workspace = Workspace(root)
    run_hidden_sitecustomize(workspace, PathFinder)
    finders = sys.meta_path
    at = finders.index(PathFinder) if PathFinder in finders else len(finders)
    finders.insert(at, OutsideFirst(workspace, PathFinder))


if __name__ == "sitecustomize" and sys.version_info >= (3, 5) and os.environ.get(WORKSPACE_VARIABLE):
    install(os.environ[WORKSPACE_VARIABLE])
