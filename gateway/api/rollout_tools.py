"""A rollout's tool server, reached from its sandbox through the gateway: ``/r/{token}/v1/tools/mcp``.

An agent in a sandbox reaches only the gateway. Where a rollout has tools served outside the sandbox
(an OpenEnv environment's MCP tools, relayed on the runner's host by ``harnesses.openenv.relay``), the
runner registers that server's URL for the rollout on the control plane, and the agent's MCP client
is pointed at ``<its base URL>/tools/mcp``:

    PUT    /api/rollout-tools   {"token": ..., "url": "http://127.0.0.1:PORT/<secret>/mcp"}   (admin key)
    DELETE /api/rollout-tools/{rollout_id}                                                       (admin key)
    POST | GET | DELETE  /r/{token}/v1/tools/mcp   -> the registered URL, and nothing else

The data-plane route is opened by the rollout token (in the path), only while the rollout runs, and
forwards to exactly the URL registered for that token's rollout: no path, query or host of the
agent's choosing is ever appended, so a token reaches its own rollout's tool server and no other URL.
Bodies are capped both ways (``MAX_TOOL_BODY_BYTES``) and only MCP's own headers pass; the runner
drops the registration when the agent is done. Registrations live in this gateway process (the runner registers
with the gateway whose base URL its agents use).
"""

from __future__ import annotations

import httpx
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from gateway.errors import GatewayError, InvalidRequest, NotFound, PayloadTooLarge
from gateway.request.identity import resolve_identity
from gateway.state import StateDep

TOOLS_PATH = "tools/mcp"  # under a rollout's base URL; the sandbox bridge forwards it too
MAX_TOOL_BODY_BYTES = 1 << 20  # a tool call's JSON-RPC request or answer; tool results are text
FORWARD_TIMEOUT_S = 300.0  # a tool call may run for a while (an environment's step)
REQUEST_HEADERS = ("content-type", "accept", "mcp-session-id", "mcp-protocol-version", "last-event-id")
RESPONSE_HEADERS = ("content-type", "mcp-session-id", "allow")


class BadGateway(GatewayError):
    status_code = 502
    type = "server_error"


class ToolServer(BaseModel):
    token: str = Field(max_length=200, description="the rollout's token")
    url: str = Field(max_length=2000, pattern=r"^https?://[^\s]+$", description="the tool server's MCP endpoint")


class ToolRegistry:
    """Rollout id -> the URL of its tool server."""

    def __init__(self) -> None:
        self.urls: dict[int, str] = {}


async def _body(request: Request) -> bytes:
    """The request body, refused past the cap while it streams in."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_TOOL_BODY_BYTES:
        raise PayloadTooLarge(
            f"a tool request of {declared} bytes exceeds the limit of {MAX_TOOL_BODY_BYTES} bytes",
            code="tool_body_too_large",
        )
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_TOOL_BODY_BYTES:
            raise PayloadTooLarge(
                f"a tool request over {MAX_TOOL_BODY_BYTES} bytes is refused", code="tool_body_too_large"
            )
    return bytes(body)


async def _forward(url: str, method: str, headers: dict[str, str], body: bytes) -> Response:
    try:
        async with httpx.AsyncClient(timeout=FORWARD_TIMEOUT_S, follow_redirects=False) as http:
            async with http.stream(method, url, headers=headers, content=body) as answer:
                data = bytearray()
                async for chunk in answer.aiter_bytes():
                    data += chunk
                    if len(data) > MAX_TOOL_BODY_BYTES:
                        raise BadGateway(
                            f"the rollout's tool server answered more than {MAX_TOOL_BODY_BYTES} bytes",
                            code="tool_answer_too_large",
                        )
    except httpx.HTTPError as exc:
        raise BadGateway(
            f"the rollout's tool server is not reachable: {type(exc).__name__}", code="tool_server_unreachable"
        ) from None
    kept = {name: answer.headers[name] for name in RESPONSE_HEADERS if name in answer.headers}
    return Response(bytes(data), status_code=answer.status_code, headers=kept)


def create_router() -> APIRouter:
    registry = ToolRegistry()
    router = APIRouter(tags=["tools"])

    @router.put("/api/rollout-tools", status_code=200)
    async def register(server: ToolServer, state: StateDep) -> dict:
        """Point the rollout's ``/r/{token}/v1/tools/mcp`` at its tool server (control plane)."""
        identity = await state.store.identity_for_token(server.token)
        if identity is None:
            raise NotFound("no rollout has this token", code="rollout_not_found")
        if await state.store.rollout_ended(identity.rollout_id) is not None:
            raise InvalidRequest(f"rollout {identity.rollout_id} has ended", code="rollout_ended")
        registry.urls[identity.rollout_id] = server.url
        return {"rollout_id": identity.rollout_id, "path": f"/r/{server.token}/v1/{TOOLS_PATH}"}

    @router.delete("/api/rollout-tools/{rollout_id}", status_code=204)
    async def unregister(rollout_id: int) -> Response:
        registry.urls.pop(rollout_id, None)
        return Response(status_code=204)

    @router.api_route(f"/r/{{token}}/v1/{TOOLS_PATH}", methods=["POST", "GET", "DELETE"], include_in_schema=False)
    async def tools(request: Request, state: StateDep) -> Response:
        """The rollout's tool server, as the agent's MCP client sees it (Streamable HTTP)."""
        identity = await resolve_identity(request, state.store, require_token=True)  # 401: none, unknown, ended
        url = registry.urls.get(identity.rollout_id)
        if url is None:
            raise NotFound(
                "this rollout has no tool server (only OpenEnv tasks give the agent tools here)", code="no_tool_server"
            )
        body = await _body(request)
        headers = {name: request.headers[name] for name in REQUEST_HEADERS if name in request.headers}
        return await _forward(url, request.method, headers, body)

    return router
