"""One owner per concept, checked on the code: outside its owner module no product module lists the sandbox
kinds, the capture modes or the harness names again (a tuple, list, set or dict of two or more of them, or a
help or message string that spells several out), nothing but the owner builds the tiny test model's config,
and the REST API's call view is derived from the store's record, not typed out beside it.

Tests may name a few of them (the cases they run); the product reads them from the owner, so a new kind,
mode or harness is one entry there. Each finder is shown to fail on a planted second list."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from gateway.api.protocol import CallDetail, CallView
from harnesses.registry import harness_names
from sandboxes.kinds import KINDS
from store.capture_modes import CAPTURE_MODES
from store.records import StoredCall
from tests.unit.test_house_rules import product_files
from tests.unit.test_import_cycles import ROOT


@dataclasses.dataclass(frozen=True)
class Concept:
    names: frozenset[str]
    owners: tuple[str, ...]  # the modules allowed to list them
    in_text: int  # a string naming this many of them, joined as a choice, is a list too


CONCEPTS = {
    "sandbox kinds": Concept(frozenset(KINDS), ("sandboxes/kinds.py",), 2),
    "capture modes": Concept(frozenset(CAPTURE_MODES), ("store/capture_modes.py",), 2),
    "harness names": Concept(frozenset(harness_names()), ("harnesses/registry.py", "harnesses/agents/__init__.py"), 3),
}
# The tiny model's config: built by its one builder; model_prep writes the (other) tiny model the engine serves.
MODEL_CONFIG_OWNERS = ("learner/tiny_model.py", "harnessrl/engine/model_prep.py")
CHOICE_JOIN = r"\s*(?:\||,|\bor\b)\s*"


def docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
    }


def listed(node: ast.AST, names: frozenset[str]) -> set[str]:
    """The names a collection literal holds (a dict: its keys)."""
    if isinstance(node, ast.Dict):
        items = [key for key in node.keys if key is not None]
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = node.elts
    else:
        return set()
    return {item.value for item in items if isinstance(item, ast.Constant) and item.value in names}


def spelled_out(text: str, names: frozenset[str], at_least: int) -> bool:
    """Whether ``text`` names ``at_least`` of ``names`` in a row, joined as a choice ("a | b", "a, b or c")."""
    name = "(?:" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + ")"
    run = rf"(?<![\w-]){name}(?:{CHOICE_JOIN}{name}){{{at_least - 1},}}(?![\w-])"
    return re.search(run, text) is not None


def second_lists(path: Path, concept: Concept) -> list[str]:
    """Where ``path`` lists the concept's names: line numbers and what it lists."""
    tree = ast.parse(path.read_text())
    skipped = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if len(names := listed(node, concept.names)) >= 2:
            found.append(f"{node.lineno}: {sorted(names)}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            if spelled_out(node.value, concept.names, concept.in_text):
                found.append(f"{node.lineno}: {node.value[:60]!r}")
    return found


def model_configs(path: Path) -> list[int]:
    """The lines where ``path`` calls a transformers model config class (one it imports: ``*Config``)."""
    tree = ast.parse(path.read_text())
    configs = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "transformers"
        for alias in node.names
        if alias.name.endswith("Config") and not alias.name.startswith("Auto")
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in configs
    ]


def outside(owners: tuple[str, ...]) -> list[Path]:
    return [path for path in product_files() if str(path.relative_to(ROOT)) not in owners]


@pytest.mark.parametrize("concept", CONCEPTS, ids=str)
def test_no_product_module_lists_a_concepts_names_outside_its_owner(concept):
    owned = CONCEPTS[concept]
    found = {str(p.relative_to(ROOT)): lists for p in outside(owned.owners) if (lists := second_lists(p, owned))}
    assert found == {}, f"a second list of the {concept}: read them from {' or '.join(owned.owners)}"


@pytest.mark.parametrize(
    ("concept", "planted"),
    [
        ("sandbox kinds", 'KINDS = ("local", "docker")\n'),
        ("sandbox kinds", 'HELP = "docker | local"\n'),
        ("capture modes", 'def f(mode):\n    return mode in {"tito", "engine"}\n'),
        ("capture modes", 'x = typer.Option(help="engine or tito, for a new run")\n'),
        ("harness names", 'AGENTS = {"pi": 1, "codex": 2}\n'),
        ("harness names", 'raise ValueError("use --harness pi|opencode|qwen-code")\n'),
    ],
)
def test_the_finder_sees_a_planted_second_list(tmp_path, concept, planted):
    path = tmp_path / "planted.py"
    path.write_text('"""A module that lists local, docker, engine or tito, pi, opencode, codex in its docstring."""\n')
    assert second_lists(path, CONCEPTS[concept]) == []  # a docstring may say what it reads
    path.write_text(planted)
    assert second_lists(path, CONCEPTS[concept]) != []


def test_one_name_or_a_name_in_a_longer_word_is_no_list(tmp_path):
    path = tmp_path / "planted.py"
    path.write_text('a = kind == "local"\nb = ("docker", "podman")\nc = "engine-model, tito"\nd = "pi, builtins"\n')
    assert all(second_lists(path, concept) == [] for concept in CONCEPTS.values())


def test_only_the_tiny_models_builder_builds_a_model_config():
    files = [p for p in outside(MODEL_CONFIG_OWNERS) if p.suffix == ".py"] + sorted((ROOT / "tests").rglob("*.py"))
    found = {str(p.relative_to(ROOT)): lines for p in files if (lines := model_configs(p))}
    assert found == {}, "build the tiny model with learner.tiny_model (tiny_base, tiny_lora)"


def test_the_finder_sees_a_planted_model_config(tmp_path):
    path = tmp_path / "planted.py"
    path.write_text("from transformers import AutoConfig, Qwen2Config as C\nAutoConfig.from_pretrained('x')\nC(1)\n")
    assert model_configs(path) == [3]


def test_the_call_view_is_the_stored_call_without_its_bodies():
    record = [f.name for f in dataclasses.fields(StoredCall)]
    assert list(CallView.model_fields) == [name for name in record if name not in ("request", "response")]
    assert list(CallDetail.model_fields)[: len(CallView.model_fields)] == list(CallView.model_fields)


def copied_fields(path: Path, fields: set[str]) -> dict[str, list[str]]:
    """The pydantic models in ``path`` that annotate more than half of ``fields``: a second copy of them."""
    copies = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and "BaseModel" in {ast.unparse(base) for base in node.bases}:
            declared = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and hasattr(s.target, "id")}
            if len(declared & fields) > len(fields) // 2:
                copies[node.name] = sorted(declared & fields)
    return copies


def test_no_wire_model_types_out_the_stored_calls_fields_again():
    fields = {f.name for f in dataclasses.fields(StoredCall)}
    copies = {str(p.relative_to(ROOT)): c for p in product_files() if (c := copied_fields(p, fields))}
    assert copies == {}, "derive the view from store.records.StoredCall (gateway.api.protocol.record_view)"


def test_the_finder_sees_a_planted_copy_of_the_stored_call(tmp_path):
    path = tmp_path / "planted.py"
    fields = [f.name for f in dataclasses.fields(StoredCall)]
    planted = fields[: len(fields) // 2 + 1]  # just more than half
    path.write_text("class CallView(BaseModel):\n" + "".join(f"    {name}: int\n" for name in planted))
    assert list(copied_fields(path, set(fields))) == ["CallView"]
