"""`harnessrl export`: samples as JSONL in the shared data contract, and Parquet datasets reads."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.reports.export import export_run
from tests.fake_tokens import decode


async def record_two_turns(gateway, run: str) -> dict:
    rollout = await gateway.new_rollout(run=run, task="t", group="g0")
    client = gateway.openai(api_key=rollout["token"])
    messages = [{"role": "user", "content": "hi"}]
    reply = await client.chat.completions.create(model="policy", messages=messages)
    messages += [
        {"role": "assistant", "content": reply.choices[0].message.content},
        {"role": "user", "content": "more"},
    ]
    await client.chat.completions.create(model="policy", messages=messages)
    return rollout


async def test_jsonl_export_follows_the_data_contract(gateway, tmp_path):
    rollout = await record_two_turns(gateway, "export-run")
    out = tmp_path / "samples.jsonl"
    count = await export_run(gateway.app.state.gateway.store, "export-run", "jsonl", out, decode=decode)
    [record] = [json.loads(line) for line in out.read_text().splitlines()]
    assert count == 1 and record["gen_id"] == f"{rollout['id']}-0" and record["group_id"].endswith(":g0")
    [sample] = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/samples")).json()["data"]
    completion = record["completion"]
    assert record["prompt_ids"] + completion["completion_ids"] == sample["input_ids"]
    assert completion["action_mask"][0] == 1 and len(completion["action_mask"]) == len(completion["completion_ids"])
    assert sum(completion["action_mask"]) == sum(sample["loss_mask"])
    assert completion["text"].startswith("Hello from the fake engine.")
    assert record["metadata"]["num_turns"] == 2 and record["metadata"]["status"] == "running"
    assert record["metadata"]["policy"] == "policy"


async def test_parquet_export_loads_with_datasets(gateway, tmp_path):
    import datasets

    await record_two_turns(gateway, "parquet-run")
    await record_two_turns(gateway, "parquet-run")
    out = tmp_path / "samples.parquet"
    assert await export_run(gateway.app.state.gateway.store, "parquet-run", "parquet", out) == 2
    loaded = datasets.load_dataset("parquet", data_files=str(out), split="train")
    assert loaded.num_rows == 2
    columns = {"gen_id", "group_id", "prompt", "prompt_ids", "prompt_roles", "completion", "metadata"}
    assert set(loaded.column_names) == columns
    assert loaded[0]["completion"]["action_mask"][0] == 1


async def test_exports_carry_the_verifiers_metrics_in_every_format(gateway, tmp_path):
    for run in ("metrics-jsonl", "metrics-parquet", "metrics-openenv"):
        rollout = await record_two_turns(gateway, run)
        verifier = {"exit_code": 0, "metrics": {"cases_passed": 5.0}, "log": "5 passed"}
        end = {"status": "finished", "rewards": {"verifier": 1.0}, "reward_details": {"verifier": verifier}}
        assert (await gateway.http.post(f"/api/rollouts/{rollout['id']}/end", json=end)).status_code == 200
    store = gateway.app.state.gateway.store
    for fmt in ("jsonl", "parquet", "openenv"):
        assert await export_run(store, f"metrics-{fmt}", fmt, tmp_path / fmt) == 1
    [record] = [json.loads(line) for line in (tmp_path / "jsonl").read_text().splitlines()]
    assert record["metadata"]["metrics"] == {"cases_passed": 5.0} and record["completion"]["reward"] == 1.0
    [traced] = [json.loads(line) for line in (tmp_path / "openenv").read_text().splitlines()]
    assert traced["metrics"] == {"cases_passed": 5.0} and traced["rewards"] == {"verifier": 1.0}
    import pyarrow.parquet as pq

    [row] = pq.read_table(tmp_path / "parquet").to_pylist()
    assert row["metadata"]["metrics"] == [{"name": "cases_passed", "value": 5.0}]


def test_export_of_an_unknown_run_names_the_fix(sqlite_db, tmp_path):
    result = CliRunner().invoke(
        app, ["export", "--run", "nope", "--out", str(tmp_path / "x.jsonl"), "--database-url", sqlite_db]
    )
    assert result.exit_code == 1 and "no run named 'nope'" in result.output
