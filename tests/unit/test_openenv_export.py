"""`export --format openenv`: OpenEnv training traces, validated by OpenEnv, round-tripping our samples."""

from __future__ import annotations

import json

import numpy as np
import pytest
from openenv.core.harness.training import TrainingTrace
from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.reports.export import export_run
from harnessrl.reports.openenv_export import rollout_record, trace_nodes, training_trace
from store.samples import CallNode, build_samples


def call(call_id, parent, prompt, output, version=0, tags=()) -> CallNode:
    logprobs = -np.arange(1, len(output) + 1, dtype=np.float32) / 7
    return CallNode(
        call_id, parent, np.array(prompt, np.int32), np.array(output, np.int32), logprobs, version, tuple(tags)
    )


def graph() -> list[CallNode]:
    """Two turns, a retry of the second, a title side call, an undelivered call and a call below the title."""
    return [
        call(1, None, [10, 11], [20, 21]),
        call(2, 1, [10, 11, 20, 21, 30], [40], version=1),
        call(3, 1, [10, 11, 20, 21, 30], [41, 42], version=1),
        call(4, None, [7], [8], tags=["title"]),
        call(5, 2, [10, 11, 20, 21, 30, 40, 50], [60], tags=["undelivered"]),
        call(6, 4, [7, 8, 9], [5]),
    ]


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


def same_samples(left, right) -> bool:
    return len(left) == len(right) and all(
        a.call_ids == b.call_ids
        and np.array_equal(a.input_ids, b.input_ids)
        and np.array_equal(a.loss_mask, b.loss_mask)
        and np.array_equal(a.old_logprobs, b.old_logprobs)
        and np.array_equal(a.policy_versions, b.policy_versions)
        for a, b in zip(left, right)
    )


def record_of(nodes, include_side=False) -> dict:
    return {"trace": json.loads(json.dumps(training_trace(nodes, include_side, 0.5).model_dump(mode="json")))}


@pytest.mark.parametrize("include_side", [False, True])
def test_traces_round_trip_to_the_same_samples_token_for_token(include_side):
    nodes = graph()
    back = trace_nodes(record_of(nodes, include_side))
    assert same_samples(build_samples(back, include_side), build_samples(nodes, include_side))


def test_side_and_undelivered_calls_are_left_out_as_in_our_samples():
    turns = TrainingTrace.model_validate(record_of(graph())["trace"]).turns
    assert [t.node_id for t in turns] == ["1", "2", "3", "6"]  # 6 becomes a root: its parent is a side call
    assert [t.metadata["parent_node_id"] for t in turns] == [None, "1", "1", None]
    with_side = TrainingTrace.model_validate(record_of(graph(), include_side=True)["trace"]).turns
    assert [t.node_id for t in with_side] == ["1", "2", "3", "4", "6"]  # undelivered never


def test_each_turn_masks_its_prompt_and_trains_its_sample():
    [first, second, *_] = training_trace(graph(), False, None).turns
    assert first.prompt_token_ids == [10, 11] and first.completion_token_ids == [20, 21]
    assert first.loss_mask == [0, 0, 1, 1] and second.loss_mask == [0, 0, 0, 0, 0, 1]
    assert first.per_token_logps == pytest.approx([-1 / 7, -2 / 7])
    assert first.metadata["reward"] is None and second.metadata["policy_version"] == 1


def test_a_call_openenv_rejects_is_not_written():
    bad = CallNode(1, None, np.array([1], np.int32), np.array([2], np.int32), np.array([0.5], np.float32), 0, ())
    with pytest.raises(ValueError, match="positive_logprob"):
        training_trace([bad], False, 1.0)


async def test_export_of_a_recorded_rollout_matches_its_samples(gateway, tmp_path):
    rollout = await record_two_turns(gateway, "openenv-run")
    store = gateway.app.state.gateway.store
    out = tmp_path / "traces.jsonl"
    assert await export_run(store, "openenv-run", "openenv", out) == 1
    [record] = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["rollout_id"] == rollout["id"] and record["group_id"].endswith(":g0")
    assert len(TrainingTrace.model_validate(record["trace"]).turns) == 2
    [sample] = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/samples")).json()["data"]
    [rebuilt] = build_samples(trace_nodes(record))
    assert rebuilt.input_ids.tolist() == sample["input_ids"] and rebuilt.loss_mask.tolist() == sample["loss_mask"]
    assert same_samples([rebuilt], build_samples(await store.calls.nodes(rollout["id"])))


async def test_rollout_record_carries_the_rewards(gateway):
    rollout = await record_two_turns(gateway, "openenv-reward")
    store = gateway.app.state.gateway.store
    [(row, group)] = await store.listings.run_rollouts("openenv-reward", 0, 10)
    record = rollout_record(row, group, await store.calls.nodes(rollout["id"]), False)
    assert record["status"] == "running" and record["reward"] is None  # unscored stays None, never 0
    assert all(t["metadata"]["reward"] is None for t in record["trace"]["turns"])


def test_cli_offers_the_openenv_format(sqlite_db, tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "export",
            "--run",
            "nope",
            "--out",
            str(tmp_path / "x.jsonl"),
            "--format",
            "openenv",
            "--database-url",
            sqlite_db,
        ],
    )
    assert result.exit_code == 1 and "no run named 'nope'" in result.output
    result = CliRunner().invoke(
        app,
        ["export", "--run", "nope", "--out", str(tmp_path / "x.jsonl"), "--format", "trl", "--database-url", sqlite_db],
    )
    assert result.exit_code == 1 and "jsonl, parquet or openenv" in result.output
