"""Checkpoints on disk: adapter, optimizer, scheduler, step and consumed position, written atomically.

A checkpoint is a folder ``step-{N:08d}`` under the checkpoint dir:
    adapter/      adapter_config.json, adapter_model.safetensors (``learner.adapters.save_adapter``)
    trainer.pt    optimizer and scheduler state dicts, step, version, torch RNG state
    meta.json     run, step, version, the groups it consumes and the consumed position
It is written into a hidden temporary folder, every file and folder fsynced, then renamed into
place: a crash leaves either nothing or a complete folder, never a partial one at the final name.

The disk is not the authority on which checkpoint counts: the store is. The learner loads the
checkpoint that the newest ``learner_checkpoints`` row names (committed with the groups it
consumed); a folder written just before a crash, whose row was never committed, is an orphan that
is ignored, and removed by ``remove_orphans``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from learner.adapters import remember_saved, save_adapter

STEP_DIR = re.compile(r"^step-(\d{8})$")
TMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class TrainerState:
    step: int  # optimizer steps taken (batches trained)
    version: int  # the policy version the learner held at that step
    meta: dict  # meta.json as written


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step-{step:08d}"


def atomic_write_dir(dest: Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` on an empty temporary sibling of ``dest``, fsync it, rename it to ``dest``.

    An existing ``dest`` is replaced (only ever an uncommitted leftover of a crashed attempt).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{dest.name}-", dir=dest.parent))
    try:
        write(tmp)
        _fsync_tree(tmp)
        if dest.exists():
            shutil.rmtree(dest)
        os.rename(tmp, dest)
        _fsync_dir(dest.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone after the rename; cleans up after an error
    return dest


def save_checkpoint(
    root: Path, step: int, version: int, model: Any, optimizer: torch.optim.Optimizer, scheduler: Any, meta: dict
) -> Path:
    """Write checkpoint ``step`` atomically and return its folder. ``model`` is a peft model."""

    def write(tmp: Path) -> None:
        save_adapter(model, tmp / "adapter")
        torch.save(
            {
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "step": step,
                "version": version,
                "rng": torch.get_rng_state(),
            },
            tmp / "trainer.pt",
        )
        (tmp / "meta.json").write_text(json.dumps({**meta, "step": step, "version": version}, default=str, indent=1))

    path = atomic_write_dir(step_dir(root, step), write)
    remember_saved(model, path / "adapter")  # the version published next links these weights
    return path


def load_checkpoint(
    path: Path, model: Any, optimizer: torch.optim.Optimizer, scheduler: Any, adapter_name: str = "default"
) -> TrainerState:
    """Restore adapter weights (into the peft adapter ``adapter_name``), optimizer and scheduler in place
    from a checkpoint folder."""
    from peft import set_peft_model_state_dict

    path = Path(path)
    if not (path / "trainer.pt").exists():
        raise FileNotFoundError(
            f"checkpoint {path} is missing or incomplete (no trainer.pt): the store names "
            f"a checkpoint the disk does not hold; was the checkpoint dir moved or deleted?"
        )
    weights = load_file(path / "adapter" / "adapter_model.safetensors")
    result = set_peft_model_state_dict(model, weights, adapter_name=adapter_name)
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise ValueError(
            f"checkpoint {path} holds weights this adapter lacks ({unexpected[:3]}...): "
            f"lora_rank / lora_targets differ from the config it was trained with"
        )
    remember_saved(model, path / "adapter", adapter_name)  # a resumed version published on start links them
    state = torch.load(path / "trainer.pt", weights_only=True)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"])
    meta = json.loads((path / "meta.json").read_text())
    return TrainerState(int(state["step"]), int(state["version"]), meta)


def remove_orphans(root: Path, committed_step: int) -> list[Path]:
    """Delete temporary folders and checkpoints newer than the committed one (never committed)."""
    root = Path(root)
    removed = []
    if not root.is_dir():
        return removed
    for child in root.iterdir():
        match = STEP_DIR.match(child.name)
        if child.name.startswith(TMP_PREFIX) or (match and int(match.group(1)) > committed_step):
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    return removed


def prune_checkpoints(root: Path, committed_step: int, keep: int) -> list[Path]:
    """Keep the ``keep`` newest checkpoints up to the committed one; delete older ones."""
    root = Path(root)
    steps = sorted(
        (int(m.group(1)), child)
        for child in root.iterdir()
        if (m := STEP_DIR.match(child.name)) and int(m.group(1)) <= committed_step
    )
    doomed = [child for _, child in steps[:-keep]] if keep > 0 else []
    for child in doomed:
        shutil.rmtree(child, ignore_errors=True)
    return doomed


def _fsync_tree(root: Path) -> None:
    for folder, _dirs, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(folder))


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
