"""The documentation holds together: the README fits on a screen or two, every document it names exists
and is linked from it, and every relative link and anchor in the README and docs/ resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
README_LINES = 200
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, fenced = set(), False
    for line in path.read_text().splitlines():
        fenced ^= line.startswith("```")
        if not fenced and (match := re.match(r"^#{1,6} (.*)", line)):
            found.add(slug(match.group(1)))
    return found


def links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # code blocks hold no links
    return [target for target in LINK.findall(text) if not re.match(r"^[a-z]+:", target)]


def test_the_readme_is_short_and_links_every_document():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_LINES
    linked = {target.split("#")[0] for target in links(ROOT / "README.md")}
    assert {f"docs/{doc.name}" for doc in DOCS} <= linked, "a document the README does not link"


@pytest.mark.parametrize("path", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_every_relative_link_and_anchor_resolves(path):
    for target in links(path):
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        assert resolved.exists(), f"{path.name}: {target} names no file"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{path.name}: {target} names no heading"
