"""Every repository path the README and docs/*.md cite exists.

The rule: a path is a word inside backticks (an inline code span, or any line of a fenced code block)
whose first ``/``-separated part is a top-level name of the repository (``gateway``, ``tests``,
``docker``, ``.ci``, ``README.md``, ...) and that either contains a ``/`` or is a top-level file.
A word ends at whitespace, quotes, brackets, ``=``, ``,`` or ``;``; a trailing ``.`` or ``:`` is
punctuation, a ``:`` inside (``rollouts/launch.py:launch_run``) starts a name within the file.
Not paths: words with a placeholder (``<name>``, ``*``, ``{``, ``$``, ``...``), URLs and option names
(their first part is no top-level name), untracked folders such as ``.venv-harbor`` (likewise), and
the few names in ``NOT_REPO_PATHS``. "Exists" means git tracks it, or would (an untracked file that no
ignore rule covers), as a file or as a folder holding one. Markdown link targets are test_docs.py's."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
WORD_BREAK = re.compile(r"[\s\"'()\[\]=,;]+")
PLACEHOLDER = re.compile(r"[<>*{}$]|\.\.\.")
# Words shaped like repository paths that name something else, each with what it names.
NOT_REPO_PATHS = {
    "tests/test.sh": "a Harbor task folder's verifier",
    "harnessrl/claude-code": "a harness image",
    "harnessrl/codex": "a harness image",
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


def cited_paths(text: str, top_level: set[str]) -> list[str]:
    """The paths ``text`` cites by the module's rule, as written (before any ``:name`` is cut)."""
    found = []
    for span in code_spans(text):
        for word in WORD_BREAK.split(span):
            word = word.removeprefix("./").rstrip(".:")
            first = word.split("/")[0]
            if first not in top_level or PLACEHOLDER.search(word) or word in NOT_REPO_PATHS:
                continue
            if "/" in word or "." in word or word == "Makefile":
                found.append(word)
    return found


def missing_paths(text: str, known: set[str]) -> list[str]:
    top_level = {path for path in known if "/" not in path}
    return [word for word in cited_paths(text, top_level) if word.split(":")[0].rstrip("/") not in known]


@pytest.fixture(scope="module")
def known() -> set[str]:
    return repository_paths()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_a_doc_cites_exists(doc, known):
    assert missing_paths(doc.read_text(), known) == []


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
        "`harnesses/agents/*.py`, `.venv-harbor/bin/pip`, `harnessrl run`, `store` and `gateway.policy.proof`.\n"
    )
    top_level = {path for path in known if "/" not in path}
    assert cited_paths(text, top_level) == [
        "gateway/recording/pipeline.py",
        "docker/Dockerfile.pi",
        "tests/benchmarks/",
        "Makefile",
    ]
    assert missing_paths(text, known) == []
