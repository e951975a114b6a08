"""`harnessrl export --format openenv`: rollouts in OpenEnv's training contract.

One JSON line per rollout: ``{"rollout_id", "group_id", "task", "status", "reward", "rewards",
"metrics", "trace"}`` (``metrics``: the verifier's, beside its reward and never part of it) where
``trace`` is an ``openenv.core.harness.training.TrainingTrace`` (schema_version 1): one ``TrainingTurn``
per retained model call, with the engine's prompt ids, the sampled ids, the sampler's logprobs and a
loss mask over prompt + completion (0 on the prompt, 1 on the sample). Every trace is built through
OpenEnv's own pydantic models, so a line that is written has passed its
validators (``validate_training_turn``: aligned ids and logprobs, finite non-positive logprobs, a
context-only prompt; unique node ids).

Retained calls are those our samples train on (``store/samples.py``): side calls (unless
``--include-side``) and undelivered calls are left out, and a kept call whose parent was left out
becomes a root. Each turn's metadata carries ``node_id`` (the call id), ``parent_node_id``, the policy
version, tags, the rollout's reward (a mirror, as OpenEnv's ``TraceEntry.reward``: None is
unscored, never 0) and ``prompt_roles`` (one ``store.records.TokenRole`` per prompt token, aligned with
``prompt_token_ids`` as ``loss_mask`` is: 0 unknown, 1 system, 2 user, 3 tool result, 4 assistant,
5 template glue; null: not recorded). OpenEnv's ``TrainingTurn`` (schema 1) has a loss mask but no role
mask, and forbids extra fields, so the roles ride in its metadata. ``trace_nodes`` rebuilds the call graph
and ``build_samples`` the very samples the learner reads, token for token, roles included.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np

from store.arrays import logprobs_or_none
from store.records import StoredRollout
from store.rewards import verifier_metrics
from store.roles import ROLE_NAMES, ROLES, role_list
from store.samples import CallNode, trained_on
from store.store import Store

PAGE = 100  # rollouts per read


def retained(nodes: list[CallNode], include_side: bool) -> list[CallNode]:
    """The calls our samples are built from, in call order."""
    return [n for n in nodes if trained_on(n.tags, include_side)]


def turn_entry(node: CallNode, parent: int | None, reward: float | None) -> dict:
    """One call as an OpenEnv trace entry (the shape ``TrainingTrace.from_entries`` reads)."""
    return {
        "prompt_token_ids": node.prompt_ids.tolist(),
        "completion_token_ids": node.output_ids.tolist(),
        # null per token for a call the policy did not sample (a teacher's: NaN in the store's arrays)
        "per_token_logps": logprobs_or_none(node.output_logprobs),
        "loss_mask": [0] * len(node.prompt_ids) + [1] * len(node.output_ids),
        "metadata": {
            "node_id": str(node.call_id),
            "parent_node_id": None if parent is None else str(parent),
            "policy_version": node.policy_version,
            "tags": list(node.tags),
            "reward": reward,
            "prompt_roles": role_list(node.prompt_roles),
        },
    }


def training_trace(nodes: list[CallNode], include_side: bool, reward: float | None):
    """The rollout's retained calls as a validated ``TrainingTrace`` (raises ValueError when one is not)."""
    from openenv.core.harness.training import TrainingTrace

    kept = retained(nodes, include_side)
    ids = {n.call_id for n in kept}
    entries = [turn_entry(n, n.parent_id if n.parent_id in ids else None, reward) for n in kept]
    return TrainingTrace.from_entries(entries)


def rollout_record(rollout: StoredRollout, group: str, nodes: list[CallNode], include_side: bool) -> dict:
    trace = training_trace(nodes, include_side, rollout.reward)
    return {
        "rollout_id": rollout.id,
        "group_id": f"{rollout.group_id}:{group}",
        "task": rollout.task_id,
        "status": rollout.status,
        "reward": rollout.reward,
        "rewards": rollout.rewards,
        "metrics": verifier_metrics(rollout.reward_details),
        "trace": trace.model_dump(mode="json"),
    }


def trace_nodes(record: dict) -> list[CallNode]:
    """The call graph back from an exported line (validated again by OpenEnv's ``TrainingTrace``)."""
    from openenv.core.harness.training import TrainingTrace

    trace = TrainingTrace.model_validate(record["trace"])
    nodes = []
    for turn in trace.turns:
        meta, parent = turn.metadata, turn.metadata.get("parent_node_id")
        nodes.append(
            CallNode(
                int(turn.node_id),
                None if parent is None else int(parent),
                np.asarray(turn.prompt_token_ids, dtype=np.int32),
                np.asarray(turn.completion_token_ids, dtype=np.int32),
                np.asarray(turn.per_token_logps, dtype=np.float32),
                int(meta["policy_version"]),
                tuple(meta.get("tags", ())),
                _roles(meta.get("prompt_roles"), len(turn.prompt_token_ids)),
            )
        )
    return nodes


def _roles(values, length: int) -> np.ndarray | None:
    """A turn's prompt roles back (None: unknown, or not one valid role per prompt token)."""
    if not isinstance(values, list) or len(values) != length:
        return None
    if not all(isinstance(v, int) and 0 <= v < len(ROLE_NAMES) for v in values):
        return None
    return np.asarray(values, dtype=ROLES)


async def run_traces(store: Store, run: str, include_side: bool) -> AsyncIterator[dict]:
    """The run's rollouts as OpenEnv records, read a page of rollouts at a time."""
    after = 0
    while page := await store.listings.run_rollouts(run, after, PAGE):
        for rollout, group in page:
            yield rollout_record(rollout, group, await store.calls.nodes(rollout.id), include_side)
        after = page[-1][0].id


async def write_openenv(store: Store, run: str, out: Path, include_side: bool = False) -> int:
    """Write one line per rollout of ``run`` to ``out``; returns how many."""
    count = 0
    with open(out, "w") as file:
        async for record in run_traces(store, run, include_side):
            file.write(json.dumps(record) + "\n")
            count += 1
    return count
