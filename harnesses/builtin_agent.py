"""The `builtin` harness: a small agent of our own on the `openai` SDK, light enough for tiny models.

The loop runs on the host and acts inside the sandbox: tools `bash`, `read_file` and `write_file`
(OpenAI function calling). Small models rarely emit tool calls, so a fenced ```bash block in a
reply is run too. A reply with neither is the final answer.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, replace

from openai import AsyncOpenAI

from harnesses.harness import AgentOutcome, RolloutTarget
from harnesses.task import Task
from sandboxes import Sandbox, SandboxSpec

SYSTEM = (
    "You are a careful assistant working in a Linux shell, in the current directory. "
    "Use the tools, or put one shell command in a ```bash code block to run it. "
    "When the task is done, reply with a short final answer and no code block."
)
BASH_BLOCK = re.compile(r"```(?:bash|sh|shell)?\s*\n(.*?)```", re.DOTALL)
OUTPUT_CHARS = 2000  # of a command's output fed back to the model
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command in the working directory.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a text file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
]


@dataclass(frozen=True)
class BuiltinSettings:
    max_turns: int = 6
    max_tokens: int = 256  # per model call
    temperature: float = 1.0
    command_timeout_s: float = 30.0
    system: str | None = SYSTEM  # None: no system prompt (tiny models answer plain questions better)
    tools: bool = True  # offer the function tools (bash blocks in replies run either way)


# One reply, short and without tools: how quickstart runs the arithmetic family (``--harness oneshot``).
ONE_SHOT = BuiltinSettings(max_turns=1, max_tokens=32, system=None, tools=False)


class BuiltinHarness:
    name = "builtin"
    side_call_patterns: dict[str, str] = {}

    def __init__(self, settings: BuiltinSettings | None = None):
        self.settings = settings or BuiltinSettings()

    def sandbox_spec(self, task: Task, target: RolloutTarget, base: SandboxSpec) -> SandboxSpec:
        # The loop runs on the host and calls the gateway itself: the sandbox needs no network.
        return replace(base, files={**base.files, **task.files}, gateway_url=None)

    async def run(self, sandbox: Sandbox, task: Task, target: RolloutTarget, timeout_s: float) -> AgentOutcome:
        client = AsyncOpenAI(base_url=target.base_url, api_key=target.token, max_retries=2, timeout=timeout_s)
        log: list[str] = []
        try:
            final = await asyncio.wait_for(self._loop(client, sandbox, task, target, log), timeout_s)
            return AgentOutcome(final, "\n".join(log)[-8000:], 0)
        except TimeoutError:
            return AgentOutcome("", "\n".join(log)[-8000:], 124, timed_out=True)
        finally:
            await client.close()

    async def _loop(
        self, client: AsyncOpenAI, sandbox: Sandbox, task: Task, target: RolloutTarget, log: list[str]
    ) -> str:
        messages: list[dict] = [{"role": "user", "content": task.instruction}]
        if self.settings.system:
            messages.insert(0, {"role": "system", "content": self.settings.system})
        last_text = ""
        for _ in range(self.settings.max_turns):
            reply = (
                (
                    await client.chat.completions.create(
                        model=target.model,
                        messages=messages,
                        max_tokens=self.settings.max_tokens,
                        temperature=self.settings.temperature,
                        **({"tools": TOOLS} if self.settings.tools else {}),
                    )
                )
                .choices[0]
                .message
            )
            log.append(f"assistant: {reply.content or ''} {[c.function.name for c in reply.tool_calls or []]}")
            messages.append(_assistant_message(reply))
            last_text = reply.content or last_text
            if reply.tool_calls:
                for call in reply.tool_calls:
                    result = await self._tool(sandbox, call.function.name, call.function.arguments)
                    log.append(f"tool {call.function.name}: {result[:200]}")
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            elif block := BASH_BLOCK.search(reply.content or ""):
                result = await self._bash(sandbox, block.group(1))
                log.append(f"bash: {result[:200]}")
                messages.append({"role": "user", "content": f"Output:\n{result}"})
            else:
                return reply.content or ""
        return last_text  # out of turns: the last thing it said

    async def _tool(self, sandbox: Sandbox, name: str, arguments: str) -> str:
        try:
            args = json.loads(arguments or "{}")
            if name == "bash":
                return await self._bash(sandbox, str(args["command"]))
            if name == "read_file":
                return (await sandbox.get_file(str(args["path"]))).decode(errors="replace")[:OUTPUT_CHARS]
            if name == "write_file":
                await sandbox.put_file(str(args["path"]), str(args["content"]).encode())
                return f"wrote {args['path']}"
            return f"error: unknown tool {name!r}; use bash, read_file or write_file"
        except (ValueError, KeyError, TypeError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
            return f"error: {type(exc).__name__}: {exc}"

    async def _bash(self, sandbox: Sandbox, command: str) -> str:
        result = await sandbox.exec(command, timeout_s=self.settings.command_timeout_s)
        status = "timed out" if result.timed_out else f"exit code {result.exit_code}"
        return f"{result.text()[-OUTPUT_CHARS:]}\n[{status}]"


def _assistant_message(reply) -> dict:
    message: dict = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [c.model_dump() for c in reply.tool_calls]
    return message
