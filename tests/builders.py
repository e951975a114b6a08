"""Builders for test data: request bodies and call records with sensible defaults."""

from __future__ import annotations

from gateway.store.records import CallRecord

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        # strict + enum: a forced call is fully determined by the grammar but for the choice, so
        # even the tiny random model finishes it in a few tokens.
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London"]}},
                       "required": ["city"], "additionalProperties": False},
        "strict": True,
    },
}


def chat_body(content: str = "Hello!", **overrides) -> dict:
    return {"model": "policy", "messages": [{"role": "user", "content": content}], **overrides}


def call_record(rollout_id: int, **overrides) -> CallRecord:
    fields = dict(
        rollout_id=rollout_id, dialect="chat", model="policy", engine_model="base",
        policy_version=0, prompt_ids=[1, 2, 3], output_ids=[4, 5], output_logprobs=[-0.5, -0.25],
        finish_reason="stop", request=chat_body(), response={"id": "x"}, latency_ms=1.0,
    )
    fields.update(overrides)
    return CallRecord(**fields)


async def run_single_rollout(harness, gateway_url: str, run: str, task, sandbox: str, options: dict):
    """One rollout of ``task`` by ``harness`` through the real runner (2 GiB, 1 CPU); its result."""
    from harnesses.gateway_client import GatewayClient
    from harnesses.runner import RunPlan, Runner
    from sandboxes import Limits, SandboxSpec

    plan = RunPlan(run=run, tasks=[task], harness=harness, group_size=1, concurrency=1, sandbox=sandbox,
                   sandbox_options=options, base_spec=SandboxSpec(limits=Limits(memory_bytes=2 * 2**30, cpus=1.0)))
    client = GatewayClient(gateway_url)
    try:
        [result] = await Runner(plan, client).run()
    finally:
        await client.close()
    return result
