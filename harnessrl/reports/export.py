"""`harnessrl export`: a run's training samples as JSONL or Parquet (or OpenEnv traces, see openenv_export).

Each record follows the data contract other async RL stacks read:
``{"gen_id", "group_id", "prompt", "prompt_ids", "prompt_roles", "completion": {"text", "completion_ids",
"old_logprobs", "action_mask", "roles", "reward"}, "metadata": {"timestamp", "status", "num_turns", "metrics",
"policy"}}``,
where ``metrics`` are the verifier's metrics (reward.json's numbers beside the reward, never part of it;
in Parquet a list of ``{"name", "value"}``, as Hugging Face datasets reads no Arrow maps).
The prompt is everything before the first sampled token; the completion is the rest of the
conversation, with ``action_mask`` 1 on sampled tokens (tool output and later prompts are 0).
``prompt_roles`` and ``completion.roles`` hold each token's ``store.records.TokenRole`` (0 unknown,
1 system, 2 user, 3 tool result, 4 assistant, 5 template glue), aligned with the ids; null where the
store has no roles for the sample (calls recorded before revision 0018).
Rollouts are read a page at a time, so a large run is never held in memory.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import numpy as np

from store.arrays import logprobs_or_none
from store.records import StoredRollout
from store.rewards import verifier_metrics
from store.roles import role_list
from store.samples import Sample, build_samples
from store.store import Store

PAGE = 100  # rollouts per read


def sample_record(
    sample: Sample, index: int, rollout: StoredRollout, group: str, decode: Callable[[list[int]], str] | None
) -> dict:
    sampled = np.flatnonzero(sample.loss_mask)
    split = int(sampled[0]) if sampled.size else len(sample.input_ids)
    prompt_ids, completion_ids = sample.input_ids[:split].tolist(), sample.input_ids[split:].tolist()
    roles = role_list(sample.roles)
    return {
        "gen_id": f"{rollout.id}-{index}",
        "group_id": f"{rollout.group_id}:{group}",
        "prompt": decode(prompt_ids) if decode else "",
        "prompt_ids": prompt_ids,
        "prompt_roles": None if roles is None else roles[:split],
        "completion": {
            "text": decode(completion_ids) if decode else "",
            "completion_ids": completion_ids,
            "old_logprobs": logprobs_or_none(sample.old_logprobs[split:]),  # null: a teacher's token
            "action_mask": sample.loss_mask[split:].astype(int).tolist(),
            "roles": None if roles is None else roles[split:],
            "reward": rollout.reward,
        },
        "metadata": {
            "timestamp": rollout.created_at.isoformat(),
            "status": rollout.status,
            "num_turns": sample.num_turns,
            "metrics": verifier_metrics(rollout.reward_details),
            "policy": rollout.policy,  # the policy that served it (store.policies)
        },
    }


async def run_records(
    store: Store, run: str, include_side: bool, decode: Callable[[list[int]], str] | None
) -> AsyncIterator[list[dict]]:
    """The run's sample records, one list per page of rollouts."""
    after = 0
    while True:
        page = await store.listings.run_rollouts(run, after, PAGE)
        if not page:
            return
        records = []
        for rollout, group in page:
            samples = build_samples(await store.calls.nodes(rollout.id), include_side)
            records += [sample_record(s, i, rollout, group, decode) for i, s in enumerate(samples)]
        yield records
        after = page[-1][0].id


async def export_run(
    store: Store,
    run: str,
    fmt: str,
    out: Path,
    include_side: bool = False,
    decode: Callable[[list[int]], str] | None = None,
) -> int:
    """Write the run's samples to ``out``; returns how many were written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "openenv":  # one OpenEnv TrainingTrace per rollout (harnessrl/reports/openenv_export.py)
        from harnessrl.reports.openenv_export import write_openenv

        return await write_openenv(store, run, out, include_side)
    pages = run_records(store, run, include_side, decode)
    if fmt == "jsonl":
        return await _write_jsonl(pages, out)
    return await _write_parquet(pages, out)


async def _write_jsonl(pages: AsyncIterator[list[dict]], out: Path) -> int:
    count = 0
    with open(out, "w") as file:
        async for records in pages:
            for record in records:
                file.write(json.dumps(record) + "\n")
            count += len(records)
    return count


def parquet_schema():
    import pyarrow as pa

    completion = pa.struct(
        [
            ("text", pa.string()),
            ("completion_ids", pa.list_(pa.int32())),
            ("old_logprobs", pa.list_(pa.float32())),
            ("action_mask", pa.list_(pa.int8())),
            ("roles", pa.list_(pa.int8())),
            ("reward", pa.float64()),
        ]
    )
    metadata = pa.struct(
        [
            ("timestamp", pa.string()),
            ("status", pa.string()),
            ("num_turns", pa.int32()),
            ("metrics", pa.list_(pa.struct([("name", pa.string()), ("value", pa.float64())]))),
            ("policy", pa.string()),
        ]
    )
    return pa.schema(
        [
            ("gen_id", pa.string()),
            ("group_id", pa.string()),
            ("prompt", pa.string()),
            ("prompt_ids", pa.list_(pa.int32())),
            ("prompt_roles", pa.list_(pa.int8())),
            ("completion", completion),
            ("metadata", metadata),
        ]
    )


def _parquet_row(record: dict) -> dict:
    """The record with its metrics as ``[{"name", "value"}]``: datasets reads no Arrow maps."""
    metrics = [{"name": name, "value": value} for name, value in record["metadata"]["metrics"].items()]
    return {**record, "metadata": {**record["metadata"], "metrics": metrics}}


async def _write_parquet(pages: AsyncIterator[list[dict]], out: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema, count = parquet_schema(), 0
    with pq.ParquetWriter(out, schema) as writer:  # an empty run still gets a readable file
        async for records in pages:
            if records:
                writer.write_table(pa.Table.from_pylist([_parquet_row(r) for r in records], schema=schema))
                count += len(records)
    return count
