"""Token roles in the exports: JSONL and Parquet carry one role per token beside the ids (null where the
store has none), and an OpenEnv trace keeps each turn's prompt roles so the samples rebuilt from it match."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from harnessrl.reports.export import export_run
from harnessrl.reports.openenv_export import trace_nodes, training_trace
from store.samples import build_samples
from tests.token_roles import record_chain


async def test_jsonl_and_parquet_exports_carry_each_tokens_role(gateway, tmp_path):
    store = gateway.state.store
    chain = await record_chain(store, run="roles-export")
    await record_chain(store, known=(False, True, True), run="roles-export")
    [sample] = build_samples(await store.calls.nodes(chain.rollout_id))
    out = tmp_path / "samples.jsonl"
    assert await export_run(store, "roles-export", "jsonl", out) == 2
    known, unknown = [json.loads(line) for line in out.read_text().splitlines()]
    assert known["prompt_roles"] + known["completion"]["roles"] == sample.roles.tolist()
    assert len(known["prompt_roles"]) == len(known["prompt_ids"])
    assert unknown["prompt_roles"] is None and unknown["completion"]["roles"] is None
    parquet = tmp_path / "samples.parquet"
    assert await export_run(store, "roles-export", "parquet", parquet) == 2
    rows = pq.read_table(parquet).to_pylist()
    assert [r["prompt_roles"] for r in rows] == [known["prompt_roles"], None]
    assert rows[0]["completion"]["roles"] == known["completion"]["roles"]


async def test_an_openenv_trace_keeps_the_prompt_roles_of_every_turn(gateway):
    store = gateway.state.store
    chain = await record_chain(store, known=(True, True, False))
    nodes = await store.calls.nodes(chain.rollout_id)
    record = {"trace": json.loads(json.dumps(training_trace(nodes, False, 0.5).model_dump(mode="json")))}
    turns = record["trace"]["turns"]
    assert [t["metadata"]["prompt_roles"] for t in turns] == [list(r) if r else None for r in chain.whole_roles]
    back = trace_nodes(record)
    assert [None if n.prompt_roles is None else n.prompt_roles.tobytes() for n in back] == list(chain.whole_roles)
    rebuilt = build_samples(back[:2])  # the path through the calls whose roles are known
    assert rebuilt[0].roles.tolist() == build_samples(nodes[:2])[0].roles.tolist()
