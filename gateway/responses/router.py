"""Routes of the Responses dialect, at /v1/responses and per rollout at /r/{token}/v1/responses."""

from __future__ import annotations

from fastapi import APIRouter, Request

from gateway.dialects import API_PREFIXES, RESPONSES
from gateway.identity import resolve_identity
from gateway.json_body import read_json_body
from gateway.openai.router import delivered, streamed
from gateway.responses.replay import response_events
from gateway.responses.serving import ResponsesServing
from gateway.state import StateDep
from gateway.streaming import StreamedAnswer


async def create_response(request: Request, state: StateDep):
    raw = await read_json_body(request)
    identity = await resolve_identity(request, state.store, state.settings.require_token)
    served = await ResponsesServing(await state.pipeline()).create(raw, identity)
    if isinstance(served, StreamedAnswer):
        return streamed(served)
    if served.stream:
        return delivered(state, served.call_id, True, None, response_events(served.response))
    return delivered(state, served.call_id, False, served.response.model_dump(mode="json"), None)


def create_router() -> APIRouter:
    router = APIRouter(tags=["responses"])
    for prefix in API_PREFIXES:
        for route in RESPONSES.routes:
            router.add_api_route(f"{prefix}{route}", create_response, methods=["POST"])
    return router
