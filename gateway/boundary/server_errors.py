"""Server errors: an exception the handlers did not map never leaves as a traceback.

It becomes a 500 naming an error id: the body carries the id and no exception text (that may hold a
secret or a path), the log holds the traceback once under the same id. After the response started, the
id is only logged. A store that fails for a while (locked by another process, disk full) is a 503 with
Retry-After instead (``gateway.errors.failure_of``). A client that went away is logged at debug level.
"""

from __future__ import annotations

import logging

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.boundary.refusal import refuse
from gateway.errors import failure_of

logger = logging.getLogger(__name__)


class ServerErrors:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def noting_start(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, noting_start)
        except ClientDisconnect:
            logger.debug("client went away during %s %s", scope.get("method"), scope.get("path"))
        except Exception as exc:
            error = failure_of(exc, f"{scope.get('method')} {scope.get('path', '')}")  # logs it once
            if not started:
                await refuse(scope, receive, send, error)
