"""How many LoRA adapters the managed engine holds, from the policies it serves (``store.policies``).

vLLM's ``--max-loras`` is how many distinct adapters one batch may mix; ``--max-cpu-loras`` how many it
keeps in memory, paging the others in from disk as calls need them (a call waits for a slot, none
fails). A policy's rollouts mostly use its current version, and those still running when it publishes
use the one before: two slots a policy let every policy's calls share a batch. The gateway keeps
``max_staleness + 1`` versions of each policy loaded; the cache holds them all, and the gateway
unloads the least recently used adapter no call needs past that (``gateway.policy.policy_set``).
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_SLOTS = 4  # what `serve` always gave one policy: evaluation pins beside training versions


@dataclass(frozen=True)
class LoraSlots:
    max_loras: int  # --max-loras: adapters in one batch
    max_cpu_loras: int  # --max-cpu-loras, and the gateway's max_adapters: adapters held at once


def lora_slots(policies: int, max_staleness: int) -> LoraSlots:
    """The engine's adapter slots for ``policies`` policies, each keeping ``max_staleness + 1`` versions."""
    policies = max(1, policies)
    batch = max(MIN_SLOTS, 2 * policies)
    return LoraSlots(batch, max(batch, policies * (max_staleness + 1) + 2))
