"""Builders for test data: request bodies and call records with sensible defaults."""

from __future__ import annotations

import json
import math

from gateway.settings import GatewaySettings
from store.records import CallRecord
from store.tables import utcnow

TEST_ADMIN_KEY = "test-admin-key"  # the control plane's key in every test gateway
ADMIN_HEADERS = {"x-admin-key": TEST_ADMIN_KEY}
TEST_HOST = "gateway"  # the in-process clients' base URL is http://gateway


def gateway_settings(database_url: str, engine_url: str, **overrides) -> GatewaySettings:
    """Settings of a test gateway: the test admin key, and the in-process clients' Host served.

    A publication's probe is not judged (infinite tolerance): the fake engine computes no model, so
    its log-probs never match a real learner's. Tests of the proof set a tolerance.
    """
    fields = {
        "database_url": database_url,
        "engine_url": engine_url,
        "admin_key": TEST_ADMIN_KEY,
        "allowed_hosts": (TEST_HOST,),
        "adapter_probe_tolerance": math.inf,
        **overrides,
    }
    return GatewaySettings(**fields)


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        # strict + enum: a forced call is fully determined by the grammar but for the choice, so
        # even the tiny random model finishes it in a few tokens.
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "London"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}


def chat_body(content: str = "Hello!", **overrides) -> dict:
    return {"model": "policy", "messages": [{"role": "user", "content": content}], **overrides}


def messages_body(content: str = "Hi", **overrides) -> dict:
    """An Anthropic Messages request."""
    return {"model": "policy", "max_tokens": 16, "messages": [{"role": "user", "content": content}], **overrides}


def call_record(rollout_id: int, **overrides) -> CallRecord:
    fields = dict(
        rollout_id=rollout_id,
        dialect="chat",
        model="policy",
        engine_model="base",
        policy_version=0,
        prompt_ids=[1, 2, 3],
        output_ids=[4, 5],
        output_logprobs=[-0.5, -0.25],
        finish_reason="stop",
        request=chat_body(),
        response={"id": "x"},
        latency_ms=1.0,
    )
    fields.update(overrides)
    return CallRecord(**fields)


def call_row(rollout_id: int, request: dict | None = None) -> dict:
    """A calls row as the store hands it to its threaded insert."""
    return {
        "rollout_id": rollout_id, "dialect": "chat", "model": "policy", "engine_model": "base",
        "policy": "policy", "policy_version": 0, "prompt_ids": b"", "prompt_offset": 0, "output_ids": b"", "output_logprobs": b"",
        "num_prompt_tokens": 0, "num_output_tokens": 0, "finish_reason": "stop", "request": request or {},
        "response": {}, "tags": [], "parent_id": None, "fork_of": None, "drift_tokens": 0, "latency_ms": 1.0,
        "temperature": None, "top_p": None, "engine": None, "queue_ms": 0.0, "moved_from": None, "source": "policy",
        "created_at": utcnow(),
    }  # fmt: skip


async def run_single_rollout(
    harness, gateway_url: str, run: str, task, sandbox: str, options: dict, admin_key: str = TEST_ADMIN_KEY
):
    """One rollout of ``task`` by ``harness`` through the real runner (2 GiB, 1 CPU) in sandboxes of the kind
    ``sandbox`` names; its result."""
    from contracts.gateway_client import GatewayClient
    from rollouts.run_plan import RunPlan
    from rollouts.runner import Runner
    from sandboxes import Limits, SandboxSpec
    from sandboxes.kinds import sandbox_kind

    plan = RunPlan(
        run=run,
        tasks=[task],
        harness=harness,
        group_size=1,
        concurrency=1,
        sandbox=sandbox_kind(sandbox),
        sandbox_options=options,
        base_spec=SandboxSpec(limits=Limits(memory_bytes=2 * 2**30, cpus=1.0)),
    )
    client = GatewayClient(gateway_url, admin_key)
    try:
        [result] = await Runner(plan, client).run()
    finally:
        await client.close()
    return result


def agent_requests(turns: int, history_chars: int = 2_000) -> list[dict]:
    """What an agent sends turn after turn: the same tools and system prompt, the history growing."""
    messages: list[dict] = [
        {"role": "system", "content": "You are a coding agent. " * 200},
        {"role": "user", "content": "Fix the failing test."},
    ]
    requests = []
    for turn in range(turns):
        requests.append(
            {
                "model": "policy",
                "messages": list(messages),
                "tools": [WEATHER_TOOL] * 10,
                "temperature": 1.0,
                "stream": turn % 2 == 0,
                "max_tokens": 512,
            }
        )
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{turn}",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": json.dumps({"city": f"c{turn}"})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": "x" * history_chars},
        ]
    return requests


def run_config(tasks, run: str, **keys):
    """A `harnessrl run` config (harnessrl/config/jobs.py) on ``tasks``; ``keys`` by their dotted names."""
    from harnessrl.config.files import load_config
    from harnessrl.config.jobs import RunConfig

    return load_config(RunConfig, None, {"tasks.source": str(tasks), "run": run, **keys})
