"""Running the real learner in a test: a config for the tiny model (small LoRA, no publishing, fast
polling) and training a run from a store until the learner stops."""

from __future__ import annotations

import asyncio
from pathlib import Path

import learner.loop
from learner.config import LearnerConfig, resolve_paths
from store.store import Store


def tiny_learner_config(model_dir: Path, out: Path, **overrides) -> LearnerConfig:
    """The learner on the tiny model: 2 groups a step, LoRA r4, nothing published, staleness unbounded."""
    values = dict(
        model_dir=str(model_dir),
        groups_per_step=2,
        lr=1e-3,
        poll_interval_s=0.05,
        publish_enabled=False,
        lora_rank=4,
        lora_alpha=8,
        max_staleness=100,
    )
    values.update(overrides)
    return resolve_paths(LearnerConfig().updated(**sectioned(**values)), out)


def sectioned(**keys) -> dict:
    """Learner keys written flat, as tests give them, in their sections (as ``LearnerConfig.updated`` takes them):
    a top-level key, a section's key by its own name where one section has it (``lr``), or ``<section>_<key>``
    (``lora_rank``, ``publish_enabled``)."""
    fields = LearnerConfig.model_fields
    sections = {name: field.annotation for name, field in fields.items() if hasattr(field.annotation, "model_fields")}
    found: dict = {}
    for name, value in keys.items():
        if name in fields:
            found[name] = value
            continue
        owners = [(s, k) for s, model in sections.items() for k in model.model_fields if name in (k, f"{s}_{k}")]
        if len(owners) != 1:
            raise KeyError(f"{name} is no learner key, or is one of several sections' (write <section>_<key>)")
        section, key = owners[0]
        found.setdefault(section, {})[key] = value
    return found


async def train_run(config: LearnerConfig, store: Store, run: str, timeout_s: float = 60, **kwargs):
    """The learner's loop on ``run`` until it stops (max_steps, a stop event, ...); its result."""
    return await asyncio.wait_for(
        learner.loop.run_learner(config, store, run, handle_signals=False, **kwargs), timeout_s
    )
