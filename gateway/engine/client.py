"""The engine client protocol and its vLLM HTTP implementation.

Upstream calls are always non-streaming and ask for token ids and logprobs; the gateway replays
the answer to the client in the form it asked for.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import httpx

from gateway.errors import EngineError, EngineUnavailable

# Transport errors that mean "the request never reached a working engine": safe to retry.
RETRYABLE = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError)
RETRY_DELAYS_S = (0.05, 0.25, 1.0)


class EngineClient(Protocol):
    async def chat(self, body: dict) -> dict: ...
    async def completions(self, body: dict) -> dict: ...
    async def models(self) -> list[dict]: ...
    async def health(self) -> bool: ...
    async def load_adapter(self, name: str, path: str) -> None: ...
    async def unload_adapter(self, name: str) -> None: ...
    async def close(self) -> None: ...


class VLLMEngineClient:
    """vLLM's OpenAI-compatible server over HTTP (also the fake engine, via an ASGI transport)."""

    def __init__(self, base_url: str, *, timeout_s: float = 600.0,
                 transport: httpx.AsyncBaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            transport=transport,
            timeout=httpx.Timeout(timeout_s, connect=5.0),
            limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256),
        )

    async def chat(self, body: dict) -> dict:
        return await self._post("/v1/chat/completions", body)

    async def completions(self, body: dict) -> dict:
        return await self._post("/v1/completions", body)

    async def models(self) -> list[dict]:
        response = await self._send("GET", "/v1/models")
        return _json_or_raise(response)["data"]

    async def health(self) -> bool:
        try:
            response = await self._http.get("/health", timeout=2.0)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def load_adapter(self, name: str, path: str) -> None:
        await self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}, text=True)

    async def unload_adapter(self, name: str) -> None:
        await self._post("/v1/unload_lora_adapter", {"lora_name": name}, text=True)

    async def close(self) -> None:
        await self._http.aclose()

    async def _post(self, path: str, body: dict, text: bool = False):
        response = await self._send("POST", path, json=body)
        if text:
            if response.status_code >= 400:
                raise _engine_error(response)
            return response.text
        return _json_or_raise(response)

    async def _send(self, method: str, path: str, **kwargs) -> httpx.Response:
        for attempt, delay in enumerate((*RETRY_DELAYS_S, None)):
            try:
                return await self._http.request(method, path, **kwargs)
            except RETRYABLE as exc:
                if delay is None:
                    raise EngineUnavailable(
                        f"engine at {self.base_url} is unreachable after {attempt + 1} attempts "
                        f"({type(exc).__name__}); check that it is running (harnessrl serve starts "
                        f"one, --engine-url points at another)"
                    ) from exc
                await asyncio.sleep(delay)
            except httpx.TimeoutException as exc:
                raise EngineUnavailable(f"engine at {self.base_url} timed out ({type(exc).__name__})") from exc
        raise AssertionError("unreachable")


def _json_or_raise(response: httpx.Response) -> dict:
    if response.status_code >= 400:
        raise _engine_error(response)
    return response.json()


def _engine_error(response: httpx.Response) -> EngineError:
    """Pass the engine's own message on, whatever shape it came in."""
    message, kind = response.text, None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            message = str(error.get("message") or error.get("detail") or message)
            kind = error.get("type")
        elif isinstance(error, str):
            message = error
    status = response.status_code if response.status_code < 500 else 502
    return EngineError(status, f"engine: {message}", kind if status < 500 else "engine_error")
