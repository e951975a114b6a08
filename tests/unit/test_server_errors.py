"""ServerErrors (gateway/boundary/server_errors.py): an exception no handler mapped is a 500 naming an
error id and nothing of the exception, in the path's dialect, logged once; after the response started,
only logged; a client that went away gets nothing."""

from __future__ import annotations

import logging

from starlette.requests import ClientDisconnect

from gateway.boundary import ServerErrors
from tests.asgi_calls import Recorded, call, http_scope, ok_app


def failing(exc: BaseException):
    def then():
        raise exc

    return then


async def test_an_unmapped_exception_is_a_500_with_an_id_and_no_exception_text(caplog):
    recorded = Recorded()
    app = ok_app(recorded, then=failing(RuntimeError("password=hunter2 in /secret/path")))
    with caplog.at_level(logging.ERROR):
        await call(ServerErrors(app), http_scope("/v1/messages"), recorded)
    assert recorded.status == 500
    assert recorded.body["type"] == "error"  # Anthropic's shape on /v1/messages
    message = recorded.body["error"]["message"]
    assert "hunter2" not in message and "/secret/path" not in message
    error_id = message.split("internal error ")[1].split(":")[0]
    assert sum(error_id in r.getMessage() for r in caplog.records) == 1  # the traceback, once, under the id


async def test_after_the_response_started_nothing_more_is_sent():
    recorded = Recorded()

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("mid-stream")

    await call(ServerErrors(app), http_scope("/v1/chat/completions"), recorded)
    assert [m["type"] for m in recorded.sent] == ["http.response.start"]


async def test_a_client_that_went_away_gets_nothing():
    recorded = Recorded()
    await call(ServerErrors(ok_app(recorded, then=failing(ClientDisconnect()))), http_scope("/v1/models"), recorded)
    assert recorded.sent == []
