"""Every repository path the README, docs/*.md, pyproject.toml and the product's code comments cite exists.

The rule: in the docs, a path is a word inside backticks (an inline code span, or any line of a fenced code block)
whose first ``/``-separated part is a top-level name of the repository (``gateway``, ``tests``,
``docker``, ``.ci``, ``README.md``, ...) and that either contains a ``/`` or is a top-level file.
A word ends at whitespace, quotes, brackets, ``=``, ``,`` or ``;``; a trailing ``.`` or ``:`` is
punctuation, a ``:`` inside (``rollouts/launch.py:launch_run``) starts a name within the file.
A glob (``harnesses/agents/*.py``) must match a path. Not paths: words with a placeholder (``<name>``,
``{``, ``$``, ``...``), URLs and option names (their first part is no top-level name), untracked folders
such as ``.venv-harbor`` (likewise), and the few names in ``NOT_REPO_PATHS``. "Exists" means git tracks
it, or would (an untracked file that no ignore rule covers), as a file or as a folder holding one.
Markdown link targets are test_docs.py's.

In the product's ``.py`` files (every package but ``tests/`` and the tasks' own files) the same rule
reads every word of each comment and docstring, backticks or not, and pyproject.toml is read whole; a
``:`` after a path starts a line number or a name. There a dotted module name is checked too: once its
first two parts name a module or package of ours (``gateway.policy``), every further part is a module,
a package or a name the package's ``__init__.py`` binds, until a module is reached (what follows is
its attributes, not checked). A dotted word whose first two parts name no module (a table's column
``rollouts.engine_s``, a TOML key ``store.url``, a file ``gateway.sock``) is not a reference."""

from __future__ import annotations

import ast
import fnmatch
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
WORD_BREAK = re.compile(r"[\s\"'()\[\]=,;]+")
CODE_WORD_BREAK = re.compile(r"[\s\"'`()\[\]=,;]+")
PLACEHOLDER = re.compile(r"[<>{}$]|\.\.\.")
DOTTED = re.compile(r"^[a-z_][a-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
NOT_PRODUCT = ("tests/", "harnesses/tasks/")  # the tests, and the tasks' own files (paths inside a task)
# Words shaped like repository paths that name something else, each with what it names.
NOT_REPO_PATHS = {
    "tests/test.sh": "a Harbor task folder's verifier",
    "harnessrl/claude-code": "a harness image",
    "harnessrl/codex": "a harness image",
    "harnessrl/opencode": "a harness image",
    "tests/test_x.py": "a pytest summary line's example, as a task's verifier prints it",
    "docker/stack-extras/wheels/": "a folder the user fills, ignored by git",
    "tests/benchmarks/results/": "the benchmarks' output folder, ignored by git",
}


def repository_paths(root: Path = ROOT) -> set[str]:
    """Files git tracks or would track, and every folder above one."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    paths = set()
    for file in filter(None, listed):
        parts = file.split("/")
        paths.update("/".join(parts[:n]) for n in range(1, len(parts) + 1))
    return paths


def code_spans(text: str) -> list[str]:
    """The inline code spans outside fenced blocks, and every line inside one."""
    spans, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            spans.append(line)
        else:
            spans += re.findall(r"`([^`]+)`", line)
    return spans


def paths_in_words(words: list[str], top_level: set[str]) -> list[str]:
    """The words that are paths by the module's rule, as written (before any ``:name`` is cut)."""
    found = []
    for word in words:
        word = word.removeprefix("./").rstrip(".:")
        first = word.split("/")[0]
        if first not in top_level or PLACEHOLDER.search(word) or word.split(":")[0] in NOT_REPO_PATHS:
            continue
        if "/" in word or "." in word or word == "Makefile":
            found.append(word)
    return found


def cited_paths(text: str, top_level: set[str]) -> list[str]:
    """The paths ``text`` (Markdown) cites in its code spans."""
    return paths_in_words([word for span in code_spans(text) for word in WORD_BREAK.split(span)], top_level)


def is_missing(word: str, known: set[str]) -> bool:
    path = word.split(":")[0].rstrip("/")
    if "*" in path:
        return not any(fnmatch.fnmatchcase(candidate, path) for candidate in known)
    return path not in known


def missing_paths(text: str, known: set[str]) -> list[str]:
    top_level = {path for path in known if "/" not in path}
    return [word for word in cited_paths(text, top_level) if is_missing(word, known)]


def product_files(known: set[str]) -> list[Path]:
    """The product's Python files: every tracked (or trackable) .py outside the tests and the tasks."""
    return [ROOT / path for path in sorted(known) if path.endswith(".py") and not path.startswith(NOT_PRODUCT)]


def comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    """Each comment and each line of each docstring of ``source``, with its line number."""
    found = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    found += [(first.lineno + n, line) for n, line in enumerate(first.value.value.splitlines())]
    return sorted(found)


def names_bound_in(init: Path) -> set[str]:
    """What a package's ``__init__.py`` defines or imports at any depth: the names ``package.name`` reaches."""
    names = set()
    for node in ast.walk(ast.parse(init.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def is_dead_module_name(word: str, known: set[str], root: Path = ROOT) -> bool:
    """Whether a dotted word names a module of ours that is not there (the module's rule)."""
    parts = word.split(".")
    if f"{parts[0]}/{parts[1]}" not in known and f"{parts[0]}/{parts[1]}.py" not in known:
        return False  # not a module reference: a column, a key, a file name
    folder = parts[0]
    for part in parts[1:]:
        if f"{folder}/{part}.py" in known:
            return False  # a module: what follows is its attributes
        if f"{folder}/{part}" in known:
            folder = f"{folder}/{part}"
            continue
        init = root / folder / "__init__.py"
        return not (init.exists() and part in names_bound_in(init))
    return False


def missing_in_code(text: str, known: set[str], root: Path = ROOT) -> list[str]:
    """The paths and module names a comment, docstring or pyproject line cites that do not exist."""
    top_level = {path for path in known if "/" not in path}
    words = CODE_WORD_BREAK.split(text)
    dead = [word for word in paths_in_words(words, top_level) if is_missing(word, known)]
    for word in words:
        word = word.rstrip(".:")
        if DOTTED.match(word) and word.split(".")[0] in top_level and is_dead_module_name(word, known, root):
            dead.append(word)
    return dead


def dead_references_in_source(source: str, known: set[str]) -> list[str]:
    return [
        f"{line}: {word}" for line, text in comments_and_docstrings(source) for word in missing_in_code(text, known)
    ]


@pytest.fixture(scope="module")
def known() -> set[str]:
    return repository_paths()


@pytest.fixture(scope="module")
def product_texts(known) -> dict[Path, list[tuple[int, str]]]:
    """Each product file's comments and docstrings, read once."""
    return {path: comments_and_docstrings(path.read_text()) for path in product_files(known)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_a_doc_cites_exists(doc, known):
    assert missing_paths(doc.read_text(), known) == []


def test_every_path_a_code_comment_or_docstring_cites_exists(known, product_texts):
    dead = [
        f"{path.relative_to(ROOT)}:{line}: {word}"
        for path, texts in product_texts.items()
        for line, text in texts
        for word in missing_in_code(text, known)
    ]
    assert dead == []


def test_every_path_pyproject_cites_exists(known):
    lines = (ROOT / "pyproject.toml").read_text().splitlines()
    dead = [f"pyproject.toml:{n}: {word}" for n, line in enumerate(lines, 1) for word in missing_in_code(line, known)]
    assert dead == []


def test_the_code_cites_paths_and_modules_at_all(known, product_texts):
    # a rule that matched nothing would pass every file
    top_level = {path for path in known if "/" not in path}
    words = [word for texts in product_texts.values() for _, text in texts for word in CODE_WORD_BREAK.split(text)]
    assert len(product_texts) > 300
    assert len(paths_in_words(words, top_level)) > 80
    assert sum(bool(DOTTED.match(word.rstrip(".:")) and word.split(".")[0] in top_level) for word in words) > 200


def test_a_dead_path_module_or_glob_in_a_comment_or_docstring_is_caught(known):
    source = (
        '"""Moved: see gateway/no_such_module.py:run and ``gateway.policy.no_such``."""\n\n'
        "x = 1  # (harnesses/openenv_*.py, gateway.engine.proof, store.training.commit_checkpoint)\n\n\n"
        "def f():\n"
        '    """Sent by sandboxes/bridge.py to gateway/engine/pool.py:81 (gateway.policy.proof)."""\n'
    )
    assert dead_references_in_source(source, known) == [
        "1: gateway/no_such_module.py:run",
        "1: gateway.policy.no_such",
        "3: harnesses/openenv_*.py",
        "7: gateway.policy.proof",
    ]


def test_columns_keys_files_and_names_a_package_binds_are_not_module_references(known):
    text = (
        "rollouts.engine_s, store.url, gateway.sock, harnessrl.db, harnessrl.rollout.id, sandboxes.create_sandbox,"
        " gateway.engine.pool.EnginePool, harnesses/agents/*.py, harnessrl/opencode:latest, tests/test.sh"
    )
    assert missing_in_code(text, known) == []


def test_the_docs_cite_paths_at_all(known):
    # a rule that matched nothing would pass every doc
    top_level = {path for path in known if "/" not in path}
    assert sum(len(cited_paths(doc.read_text(), top_level)) for doc in DOCS) > 100


def test_a_bogus_path_is_caught_inline_and_in_a_code_block(known):
    text = "Edit `gateway/no_such_module.py:run` then\n```bash\n.venv/bin/python tests/benchmarks/gone.py --x 1\n```\n"
    assert missing_paths(text, known) == ["gateway/no_such_module.py:run", "tests/benchmarks/gone.py"]


def test_real_paths_urls_options_and_placeholders_are_not_flagged(known):
    text = (
        "See `gateway/recording/pipeline.py`, `docker/Dockerfile.pi`, `tests/benchmarks/` and `Makefile`.\n"
        "Not paths: `https://example.com/gateway/x.py`, `--tasks builtin:shell`, `docker/Dockerfile.<name>`,\n"
        "`.venv-harbor/bin/pip`, `harnessrl run`, `store` and `gateway.policy.proof`. A glob: `harnesses/agents/*.py`.\n"
    )
    top_level = {path for path in known if "/" not in path}
    assert cited_paths(text, top_level) == [
        "gateway/recording/pipeline.py",
        "docker/Dockerfile.pi",
        "tests/benchmarks/",
        "Makefile",
        "harnesses/agents/*.py",
    ]
    assert missing_paths(text, known) == []
    assert missing_paths("`harnesses/agents/*.rs`", known) == ["harnesses/agents/*.rs"]
