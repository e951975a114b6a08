"""A task's split, from its name alone.

``sha256(name)`` read as a fraction of 2**64 below ``test_fraction`` is ``test``, else ``train``: a task
keeps its split whatever else its dataset holds, on every machine, so training on ``--split train`` never
sees a task that ``--split test`` evaluates. Generated families (harnesses/shell_family.py) read it to
place their instances; ``--split`` (harnesses/datasets.py) to select them.
"""

from __future__ import annotations

import hashlib

SPLITS = ("all", "train", "test")
DEFAULT_TEST_FRACTION = 0.2


def split_of(name: str, test_fraction: float = DEFAULT_TEST_FRACTION) -> str:
    """``test`` or ``train``: the task name's hash as a fraction in [0, 1), below ``test_fraction``: test."""
    digest = hashlib.sha256(name.encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") / 2**64 < test_fraction else "train"
