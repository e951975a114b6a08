"""No import cycle in the house: the project's modules, linked by their imports (a package counting as
imported with any of its modules), form no loop. An import inside a function counts too: deferring it
dodges Python's loading order but leaves the two modules depending on each other. Only imports under
``TYPE_CHECKING`` (annotations) are left out.

Nor do packages: within each package (the project's root included), its subpackages and modules, each
standing for everything under it, form no loop either, so ``gateway.engine`` and ``gateway.policy`` are
layers (one imports the other, never both) and so are the top-level packages."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("contracts", "gateway", "store", "harnessrl", "harnesses", "rollouts", "learner", "sandboxes", "migrations")


def project_modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def owner(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an imported name lives in (``a.b.c`` may be a module or a name in ``a.b``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _run_time_nodes(tree: ast.Module):
    """Every node but those under ``if TYPE_CHECKING:``."""
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending += node.orelse
            continue
        yield node
        pending += ast.iter_child_nodes(node)


def imported(path: Path) -> list[str]:
    names = []
    for node in _run_time_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return names


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target in imported(path):
            found = owner(target, modules)
            while found:  # importing a.b.c runs a and a.b first
                if found != name and not name.startswith(found + "."):
                    graph[name].add(found)
                found = owner(found.rpartition(".")[0], modules) if "." in found else None
    return graph


def child_of(package: str, name: str) -> str | None:
    """The subpackage or module of ``package`` ("" for the root) that holds ``name``, None outside it."""
    prefix = package + "." if package else ""
    if name == package or not name.startswith(prefix):
        return None
    return prefix + name.removeprefix(prefix).split(".")[0]


def package_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """``graph`` seen from ``package``: its children, linked when a module under one imports one under another."""
    children: dict[str, set[str]] = {}
    for name, targets in graph.items():
        if (source := child_of(package, name)) is None:
            continue
        linked = {child_of(package, target) for target in targets} - {None, source}
        children.setdefault(source, set()).update(linked)
    return children


def packages(modules: dict[str, Path]) -> list[str]:
    return ["", *sorted(name for name, path in modules.items() if path.name == "__init__.py")]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while (member := stack.pop()) != node:
                        component.append(member)
                    component.append(node)
                    if len(component) > 1:
                        found.append(sorted(component))
            elif step not in index:
                index[step] = low[step] = len(index)
                stack.append(step)
                work.append((step, iter(sorted(graph[step]))))
            elif step in stack:
                low[node] = min(low[node], index[step])
    return found


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_module_of_the_project_imports_itself_through_others():
    graph = import_graph()
    assert len(graph) > 200 and graph["gateway.app"], "the walk found the project's modules and their imports"
    assert cycles(graph) == []


def test_a_cycle_between_two_packages_is_found_though_no_module_cycle_is():
    graph = {"a.x": {"b.y"}, "b.z": {"a.w"}, "a.w": set(), "b.y": set(), "c": {"a.x"}}
    assert cycles(graph) == []
    assert cycles(package_graph(graph, "")) == [["a", "b"]]
    assert package_graph(graph, "a") == {"a.x": set(), "a.w": set()}


def test_no_subpackage_or_package_module_imports_itself_through_others():
    modules, graph = project_modules(), import_graph()
    assert {"gateway.engine", "gateway.policy"} <= set(package_graph(graph, "gateway")), "subpackages are nodes"
    found = {package or "(root)": cycles(package_graph(graph, package)) for package in packages(modules)}
    assert {package: loops for package, loops in found.items() if loops} == {}
