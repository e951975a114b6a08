"""The quickstart recipes the Makefile's demos run, as `harnessrl quickstart --config` files: ``demo.toml``
(`make demo`: pi on the shell tasks, a warm start from the tasks' solutions, GRPO, held-out evaluations) and
``arithmetic.toml`` (`make demo-arithmetic`: the builtin one-shot harness on arithmetic)."""

from __future__ import annotations

from pathlib import Path

RECIPES = Path(__file__).parent


def recipe_path(name: str) -> Path:
    """The recipe ``name`` (demo, arithmetic): a file shipped with the package."""
    return RECIPES / f"{name}.toml"
