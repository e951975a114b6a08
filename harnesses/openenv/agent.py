"""The builtin agent on OpenEnv tasks: the environment's MCP tools are the agent's tools.

For a task of ``--tasks openenv:SPEC`` the environment is started (or reached) for the rollout and
reset to the task over one OpenEnv WebSocket session (``MCPToolClient``); its tools, listed by MCP
``tools/list``, are offered to the model as OpenAI function tools, and every tool call the model
makes is an OpenEnv ``CallToolAction`` step. The loop ends when the environment says the episode is
done, the model answers without a tool call, or the turns run out; the outcome carries the last
observation's reward (``EnvOutcome.env_reward``), which ``environment_reward`` records.

Security: the loop runs on the host, and so does the environment, on 127.0.0.1; the sandbox gets no
network and no route to the environment. The model reaches the environment only as tool calls by
name with JSON arguments (the environment refuses names it does not serve, and OpenEnv reserves
``reset``/``step``/``state``/``close``); once the environment ends the episode no later call reaches
it, so a reply cannot submit again after its answer was scored. Its model calls go through the
gateway with the rollout's token. Any other task goes to the wrapped harness unchanged.

A CLI agent that speaks MCP (OpenCode, Hermes: ``supports_mcp``) runs in its sandbox as usual, with
one MCP server in its config, ``<its base URL>/tools/mcp``: the gateway forwards that route, for the
rollout's token only, to a relay on the host (``harnesses.openenv.relay``) that holds the rollout's
OpenEnv session and makes each tool call a step, so the environment's reward is read the same way.
The relay is registered for the rollout on the gateway's control plane (admin key) and dropped when
the agent is done.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

from openai import AsyncOpenAI

from harnesses.harness import AgentOutcome, Harness, RolloutTarget
from harnesses.openenv.relay import ToolRelay, registered
from harnesses.openenv.tasks import REWARD_NAME, EnvOutcome, EnvServer, EnvTaskRef, tool_text
from harnesses.registry import BUILTIN, mcp_agents
from harnesses.task import Task, TaskError
from sandboxes import Sandbox, SandboxSpec

SYSTEM = (
    "You are an agent acting in an environment through its tools. Call the tools to do the task; "
    "when it is done, reply with a short final answer and no tool call."
)
EPISODE_OVER = "error: the episode is over; this call was not made"


class OpenEnvToolsHarness:
    """Wraps a harness: OpenEnv tasks run the builtin loop on the environment's tools, others the harness."""

    def __init__(
        self,
        inner: Harness,
        max_turns: int = 8,
        max_tokens: int = 256,
        temperature: float = 1.0,
        admin_key: str | None = None,
    ):
        """``admin_key``: the gateway's, to register a CLI agent's tool relay for its rollout."""
        self.inner, self.name = inner, inner.name
        self.side_call_patterns = inner.side_call_patterns
        self.max_turns, self.max_tokens, self.temperature = max_turns, max_tokens, temperature
        self.admin_key = admin_key
        self.through_mcp = bool(getattr(inner, "supports_mcp", False))  # a CLI agent: tools over MCP

    def sandbox_spec(self, task: Task, target: RolloutTarget, base: SandboxSpec) -> SandboxSpec:
        if EnvTaskRef.of(task) is None or self.through_mcp:
            return self.inner.sandbox_spec(task, target, base)
        return replace(base, files={**base.files, **task.files}, gateway_url=None)  # no network at all

    async def run(self, sandbox: Sandbox, task: Task, target: RolloutTarget, timeout_s: float) -> AgentOutcome:
        ref = EnvTaskRef.of(task)
        if ref is None:
            return await self.inner.run(sandbox, task, target, timeout_s)
        server, log = EnvServer(ref.spec), []
        url = await asyncio.to_thread(server.start)
        try:
            if self.through_mcp:
                return await self._agent_episode(url, ref, sandbox, task, target, timeout_s)
            return await asyncio.wait_for(self._episode(url, ref, task, target, timeout_s, log), timeout_s)
        except TimeoutError:
            return EnvOutcome("", "\n".join(log)[-8000:], 124, timed_out=True)
        finally:
            await asyncio.to_thread(server.stop)

    async def _agent_episode(
        self, url: str, ref: EnvTaskRef, sandbox: Sandbox, task: Task, target: RolloutTarget, timeout_s: float
    ) -> EnvOutcome:
        """A CLI agent in its sandbox, its MCP client on the rollout's tools route (relayed to the environment)."""
        async with ToolRelay(url, ref, timeout_s) as relay, registered(target, relay.url, self.admin_key):
            outcome = await self.inner.run(sandbox, task, replace(target, tools=True), timeout_s)
        episode = relay.episode
        log = "\n".join([outcome.log, "--- environment ---", *episode.log])[-8000:]
        return EnvOutcome(
            outcome.final_text,
            log,
            outcome.exit_code,
            outcome.timed_out,
            env_reward=episode.reward,
            env_done=episode.done,
            tool_calls=episode.calls,
        )

    async def _episode(
        self, url: str, ref: EnvTaskRef, task: Task, target: RolloutTarget, timeout_s: float, log: list[str]
    ) -> EnvOutcome:
        from openenv.core.env_server.mcp_types import CallToolAction
        from openenv.core.mcp_client import MCPToolClient

        client = AsyncOpenAI(base_url=target.base_url, api_key=target.token, max_retries=2, timeout=timeout_s)
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.instruction}]
        reward, done, calls, final = None, False, 0, ""
        try:
            async with MCPToolClient(base_url=url, message_timeout_s=timeout_s) as env:
                await env.reset(split=ref.split, index=ref.index)
                tools = [openai_tool(t) for t in await env.list_tools()]
                for _ in range(self.max_turns):
                    reply = (
                        (
                            await client.chat.completions.create(
                                model=target.model,
                                messages=messages,
                                tools=tools,
                                max_tokens=self.max_tokens,
                                temperature=self.temperature,
                            )
                        )
                        .choices[0]
                        .message
                    )
                    messages.append(_assistant_message(reply))
                    final = reply.content or final
                    log.append(f"assistant: {reply.content or ''} {[c.function.name for c in reply.tool_calls or []]}")
                    if not reply.tool_calls:
                        break
                    for call in reply.tool_calls:
                        if done:  # the episode is over: later calls of the reply never reach the environment
                            messages.append({"role": "tool", "tool_call_id": call.id, "content": EPISODE_OVER})
                            continue
                        step = await env.step(
                            CallToolAction(tool_name=call.function.name, arguments=_arguments(call.function.arguments))
                        )
                        calls += 1
                        reward = step.reward if step.reward is not None else reward
                        done = step.done
                        text = tool_text(step.observation)
                        log.append(f"tool {call.function.name}: {text[:200]} (reward {step.reward}, done {step.done})")
                        messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
                    if done:
                        break
        finally:
            await client.close()
        return EnvOutcome(final, "\n".join(log)[-8000:], 0, env_reward=reward, env_done=done, tool_calls=calls)


def openai_tool(tool) -> dict:
    """An MCP tool as an OpenAI function tool."""
    schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None) or {"type": "object"}
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description or "", "parameters": schema},
    }


def _arguments(text: str | None) -> dict:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _assistant_message(reply) -> dict:
    message: dict = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [c.model_dump() for c in reply.tool_calls]
    return message


def with_environments(
    tasks: list[Task], harness: Harness, rewards: tuple, admin_key: str | None = None
) -> tuple[Harness, tuple]:
    """The harness and reward functions a run needs: OpenEnv tasks get the environment's tools and reward."""
    if not any(EnvTaskRef.of(task) for task in tasks):
        return harness, rewards
    if harness.name != BUILTIN and not getattr(harness, "supports_mcp", False):
        raise TaskError(
            f"--tasks openenv: runs with --harness {BUILTIN} or an agent that speaks MCP "
            f"({', '.join(mcp_agents())}); {harness.name} gets no MCP tools from harnessrl yet"
        )
    from harnesses.grading.reward_functions import load_reward_function

    return OpenEnvToolsHarness(harness, admin_key=admin_key), (*rewards, load_reward_function(REWARD_NAME))
