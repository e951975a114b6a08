"""An OpenEnv environment's tools as an MCP server for a CLI agent, run on the host for one rollout.

    agent's MCP client (sandbox) -> sandbox bridge -> gateway /r/<token>/v1/tools/mcp -> this relay
        -> the rollout's OpenEnv session (WebSocket, reset to the task) -> the environment's tools

The relay holds the rollout's one OpenEnv session (``MCPToolClient``) and speaks the part of MCP's
Streamable HTTP transport a tools client needs, answering every request with JSON (which the
transport allows): ``initialize``, ``ping``, notifications, ``tools/list`` and ``tools/call``. GET (a
server-to-client event stream) is 405, as the transport says for servers that offer none. Each
``tools/call`` is an OpenEnv ``CallToolAction`` step, as the builtin harness makes it
(``harnesses.openenv.agent``), so the environment's reward and the episode's end are seen here; once
the episode is over no call reaches the environment. Calls are made one at a time.

It listens on 127.0.0.1 under a secret path that only the gateway is told (``PUT /api/rollout-tools``);
the sandbox has no route to it but the gateway's, which forwards only its own rollout's requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from dataclasses import dataclass, field

from aiohttp import web

from contracts.gateway_client import GatewayClient, GatewayRefused, GatewayUnreachable
from harnesses.harness import RolloutTarget
from harnesses.openenv.tasks import EnvTaskRef, tool_text
from harnesses.task import TaskError

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MAX_BODY_BYTES = 1 << 20  # a JSON-RPC request; the gateway caps it too
EPISODE_OVER = "the episode is over; this call was not made"
LOG_LINES = 200


@dataclass
class Episode:
    """What the environment said over the rollout."""

    reward: float | None = None  # the last step's reward that was not None
    done: bool = False
    calls: int = 0  # tool calls that reached the environment
    log: list[str] = field(default_factory=list)

    def note(self, line: str) -> None:
        if len(self.log) < LOG_LINES:
            self.log.append(line)


class ToolRelay:
    """``async with ToolRelay(env_url, ref) as relay``: ``relay.url`` serves the environment's tools."""

    def __init__(self, env_url: str, ref: EnvTaskRef, timeout_s: float = 300.0):
        self.env_url, self.ref, self.timeout_s = env_url, ref, timeout_s
        self.episode = Episode()
        self.url = ""
        self._secret = secrets.token_urlsafe(24)
        self._stack = contextlib.AsyncExitStack()
        self._lock = asyncio.Lock()
        self._env = None
        self._tools: list[dict] = []

    async def __aenter__(self) -> ToolRelay:
        from openenv.core.mcp_client import MCPToolClient

        try:
            self._env = await self._stack.enter_async_context(
                MCPToolClient(base_url=self.env_url, message_timeout_s=self.timeout_s)
            )
            await self._env.reset(split=self.ref.split, index=self.ref.index)
            self._tools = [mcp_tool(t) for t in await self._env.list_tools()]
            app = web.Application(client_max_size=MAX_BODY_BYTES)
            app.router.add_route("*", f"/{self._secret}/mcp", self._handle)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            self._stack.push_async_callback(runner.cleanup)
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
        except BaseException:
            await self._stack.aclose()
            raise
        host, port = runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/{self._secret}/mcp"
        return self

    async def __aexit__(self, *exc) -> None:
        await self._stack.aclose()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "DELETE":  # the client ends its session: nothing is kept per session
            return web.Response(status=204)
        if request.method != "POST":
            return web.Response(status=405, headers={"Allow": "POST, DELETE"})
        try:
            message = json.loads(await request.read())
        except web.HTTPRequestEntityTooLarge:
            return rpc_error(None, -32600, f"request over {MAX_BODY_BYTES} bytes", status=413)
        except ValueError:
            return rpc_error(None, -32700, "parse error: the body is not JSON", status=400)
        if not isinstance(message, dict) or not isinstance(message.get("method", ""), str):
            return rpc_error(None, -32600, "one JSON-RPC request object per POST (no batches)", status=400)
        if "id" not in message or "method" not in message:  # a notification, or a response to us: accepted
            return web.Response(status=202)
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        try:
            result = await self._answer(message["method"], params)
        except KeyError as exc:
            return rpc_error(message["id"], -32601, f"method not found: {exc.args[0]}")
        except ValueError as exc:
            return rpc_error(message["id"], -32602, str(exc))
        except Exception as exc:  # the environment's session broke: the agent is told, the relay goes on
            return rpc_error(message["id"], -32603, f"the environment failed: {type(exc).__name__}: {exc}"[:500])
        return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result})

    async def _answer(self, method: str, params: dict) -> dict:
        if method == "initialize":
            asked = params.get("protocolVersion")
            return {
                "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": f"openenv-{self.ref.env}", "version": "1"},
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": self._tools}
        if method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments") or {}
            if not isinstance(name, str) or not isinstance(arguments, dict):
                raise ValueError("tools/call needs a tool name and an arguments object")
            return await self._call(name, arguments)
        raise KeyError(method)

    async def _call(self, name: str, arguments: dict) -> dict:
        from openenv.core.env_server.mcp_types import CallToolAction

        async with self._lock:
            episode = self.episode
            if episode.done:
                return tool_result(EPISODE_OVER, error=True)
            step = await self._env.step(CallToolAction(tool_name=name, arguments=arguments))
            episode.calls += 1
            episode.reward = step.reward if step.reward is not None else episode.reward
            episode.done = bool(step.done)
            text = tool_text(step.observation)
            episode.note(f"tool {name}: {text[:200]} (reward {step.reward}, done {step.done})")
            return tool_result(text, error=bool(getattr(step.observation, "error", None)))


@contextlib.asynccontextmanager
async def registered(target: RolloutTarget, url: str, admin_key: str | None):
    """The relay at ``url`` registered as the rollout's tool server while the block runs."""
    suffix = f"/r/{target.token}/v1"
    gateway = GatewayClient(target.base_url.rstrip("/").removesuffix(suffix), admin_key)
    try:
        try:
            answer = await gateway.register_tools(target.token, url)
        except GatewayRefused as exc:  # a 401 names --admin-key
            raise TaskError(f"the gateway refused the rollout's tool server: {exc}") from None
        try:
            yield
        finally:
            with contextlib.suppress(GatewayRefused, GatewayUnreachable):
                await gateway.unregister_tools(answer["rollout_id"])
    finally:
        await gateway.close()


def mcp_tool(tool) -> dict:
    """An OpenEnv tool as MCP's tools/list lists it."""
    schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None) or {"type": "object"}
    return {"name": tool.name, "description": tool.description or "", "inputSchema": schema}


def tool_result(text: str, error: bool = False) -> dict:
    return {"content": [{"type": "text", "text": text}], "isError": error}


def rpc_error(request_id, code: int, message: str, status: int = 200) -> web.Response:
    return web.json_response(
        {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}, status=status
    )
