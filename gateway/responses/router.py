"""Routes of the Responses dialect, at /v1/responses and per rollout at /r/{token}/v1/responses."""

from __future__ import annotations

from fastapi import APIRouter, Request

from gateway.dialects import API_PREFIXES, RESPONSES
from gateway.responses.replay import response_events
from gateway.responses.serving import ResponsesServing
from gateway.routes import delivered, open_call, streamed
from gateway.state import StateDep
from gateway.streaming import StreamedAnswer


async def create_response(request: Request, state: StateDep):
    call = await open_call(request, state)
    served = await ResponsesServing(call.pipeline).create(call.raw, call.identity)
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
