"""Routes of the Anthropic dialect, at /v1/messages and per rollout at /r/{token}/v1/messages."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from gateway.anthropic.serving import AnthropicServing
from gateway.dialects import API_PREFIXES, COUNT_TOKENS, MESSAGES
from gateway.request.identity import resolve_identity
from gateway.request.json_body import read_json_body
from gateway.routes import answered, open_call
from gateway.state import StateDep


async def messages(request: Request, state: StateDep):
    call = await open_call(request, state, bodies=state.resent_bodies)  # the resent history parsed once
    return answered(state, call, await AnthropicServing(call.pipeline).messages(call.raw, call.identity))


async def count_tokens(request: Request, state: StateDep) -> JSONResponse:
    raw = await read_json_body(request)
    await resolve_identity(request, state.store, state.settings.require_token)  # same access rule as calls
    return JSONResponse(await AnthropicServing(await state.pipeline()).count_tokens(raw))


def create_router() -> APIRouter:
    router = APIRouter(tags=["anthropic"])
    for prefix in API_PREFIXES:
        for dialect, endpoint in ((MESSAGES, messages), (COUNT_TOKENS, count_tokens)):
            for route in dialect.routes:
                router.add_api_route(f"{prefix}{route}", endpoint, methods=["POST"])
    return router
