"""How an engine's failures read: an agent's message names no engine address and carries no engine text
(either can name internal hosts and paths); the operator's log line beside it has both."""

from __future__ import annotations

import logging

from gateway.errors import EngineError, GatewayError

logger = logging.getLogger("gateway.engine.client")  # the name operators' filters already use


def logged(error: GatewayError, base_url: str, exc: BaseException) -> GatewayError:
    """``error``, logged with the engine's URL: the message a client (an agent) reads names no address,
    the operator's log does (and /metrics lists the engines)."""
    logger.warning("engine %s: %s (%s: %s)", base_url, error.message, type(exc).__name__, exc)
    return error


def engine_failed(how: str, message: str) -> EngineError:
    """A failure inside the engine, as an agent reads it: no engine text, which can name internal
    addresses and paths; the operator's log has it."""
    logger.warning("the engine failed (%s): %s", how, message)
    return EngineError(502, f"the engine failed ({how}); the gateway's log holds its message", "engine_error")
