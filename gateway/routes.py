"""What every dialect's model route shares: opening a call (its body, who it belongs to, the pipeline)
and delivering the recorded answer (JSON, a replayed stream, or a stream passed through), tagged
``undelivered`` when it never reaches the client."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import StreamingResponse

from gateway.delivery import UNDELIVERED, Delivery, JSONBody
from gateway.identity import resolve_identity
from gateway.json_body import read_json_body
from gateway.pipeline import ChatPipeline
from gateway.state import GatewayState
from gateway.store.records import RolloutIdentity
from gateway.streaming import StreamedAnswer

CALL_ID_HEADER = "x-harnessrl-call-id"


@dataclass(frozen=True)
class OpenedCall:
    raw: dict  # the client's body, parsed
    identity: RolloutIdentity
    pipeline: ChatPipeline


async def open_call(request: Request, state: GatewayState) -> OpenedCall:
    """The body (size-limited JSON), then the caller's identity, then the pipeline: every model route's start."""
    raw = await read_json_body(request)
    identity = await resolve_identity(request, state.store, state.settings.require_token)
    return OpenedCall(raw, identity, await state.pipeline())


def delivered(state: GatewayState, call_id: int, stream: bool, body, content) -> Delivery:
    """The recorded call's response, a stream of ``content`` or JSON ``body``; tagged if never delivered."""
    headers = {CALL_ID_HEADER: str(call_id)}
    response = (
        StreamingResponse(content, media_type="text/event-stream", headers=headers)
        if stream
        else JSONBody(body, headers=headers)
    )
    return Delivery(response, lambda: state.writer.add_tag(call_id, UNDELIVERED))


def streamed(answer: StreamedAnswer) -> Delivery:
    """A call streamed through: its events as they come; cut short, it is recorded ``undelivered``
    (the call id goes out in the stream, once the call exists)."""
    response = StreamingResponse(answer.events, media_type="text/event-stream")
    return Delivery(response, lambda: answer.call.undelivered(UNDELIVERED))
