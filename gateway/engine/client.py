"""The engine client protocol and its vLLM HTTP implementation.

Upstream calls ask for token ids and logprobs. A non-streaming call returns the engine's body; a
streaming one (``chat_stream``) returns an ``EngineStream`` once the engine accepted the request (an
engine error is raised before any chunk), whose chunks the gateway translates as they arrive.
Closing an ``EngineStream`` before its end drops the connection, which makes vLLM abort the request.
A transport failure's message names no engine address (an agent reads it); the log line beside it does.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Protocol

import aiohttp
import orjson
from yarl import URL

from gateway.engine.body import EncodedBody
from gateway.engine.failures import engine_failed, logged
from gateway.engine.http1 import BrokenAnswer, Dropped, Http1Pool
from gateway.engine.stream import AiohttpBody, EngineStream
from gateway.engine.token_prefix import loads_answer
from gateway.errors import EngineError, EngineTimeout, EngineUnavailable
from store.json_text import json_bytes

# Transport errors that mean "the request never reached a working engine": safe to retry.
# ClientOSError is how a pooled connection that the engine closed while idle fails on write
# ("Can not write request body"). (aiohttp, not httpx: httpx's pool cost per request grows with
# its number of connections.)
RETRYABLE = (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, Dropped)
# What a client raises when its engine failed in transport (unreachable after those retries, or a
# connection broken mid-answer): the engine pool takes that engine out and moves its rollouts.
# A timeout is not one: a slow engine is not a dead one, and resending would double its load.
ENGINE_DOWN = (EngineUnavailable,)
# vLLM's server closes idle connections after VLLM_HTTP_TIMEOUT_KEEP_ALIVE (5 s by default); the
# pool drops them sooner so it never hands out one the engine is closing.
KEEPALIVE_S = 4.0
RETRY_DELAYS_S = (0.05, 0.25, 1.0)


class ModelNotLoaded(EngineError):
    """The engine does not serve the model named in the call (an adapter it lost, e.g. on a restart)."""

    def __init__(self, message: str, model: str | None):
        super().__init__(404, message, "not_found_error")
        self.model = model


def base_model_entry(models: list[dict]) -> dict | None:
    """The engine's base model in its ``/v1/models`` listing: the model without a parent (adapters
    name the base as theirs); None when it lists none."""
    return next((m for m in models if not m.get("parent")), None)


def base_model_id(models: list[dict]) -> str | None:
    """The name of the engine's base model in its ``/v1/models`` listing; None when it lists none."""
    base = base_model_entry(models)
    return None if base is None else base["id"]


class EngineClient(Protocol):
    async def chat(self, body: dict) -> dict: ...
    async def completions(self, body: dict) -> dict: ...
    async def chat_stream(self, body: dict) -> EngineStream: ...
    async def tokenize(self, body: dict) -> dict: ...
    async def models(self) -> list[dict]: ...
    async def health(self) -> bool: ...
    async def load_adapter(self, name: str, path: str) -> None: ...
    async def unload_adapter(self, name: str) -> None: ...
    async def close(self) -> None: ...


@dataclass(frozen=True)
class EngineResponse:
    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")


class VLLMEngineClient:
    """vLLM's OpenAI-compatible server over HTTP (the fake engine speaks the same)."""

    def __init__(self, base_url: str, *, timeout_s: float = 600.0):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=5.0)
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[str, URL] = {}  # path -> its URL, parsed once (aiohttp parses a str every call)
        # answered calls (chat, completions) on lean kept-alive connections (gateway.engine.http1)
        self._answers = Http1Pool(self.base_url, timeout_s, KEEPALIVE_S) if Http1Pool.serves(self.base_url) else None

    def _http(self) -> aiohttp.ClientSession:
        # Created lazily: a ClientSession belongs to the running event loop.
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=1024, limit_per_host=0, keepalive_timeout=KEEPALIVE_S)
            # no cookies to keep from an engine: the jar's per-request filtering is skipped
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, cookie_jar=aiohttp.DummyCookieJar()
            )
        return self._session

    async def chat(self, body: dict) -> dict:
        return _answer_or_raise(await self._answered("/v1/chat/completions", body), body.get("model"))

    async def completions(self, body: dict) -> dict:
        return _answer_or_raise(await self._answered("/v1/completions", body), body.get("model"))

    async def chat_stream(self, body: dict) -> EngineStream:
        """A streamed chat completion (``body["stream"]`` true), once the engine accepted it."""
        return await self._open_stream("/v1/chat/completions", body)

    async def completions_stream(self, body: dict) -> EngineStream:
        return await self._open_stream("/v1/completions", body)

    async def tokenize(self, body: dict) -> dict:
        """The prompt's token ids as the engine renders it: ``{"count", "max_model_len", "tokens"}``."""
        return _json_or_raise(await self._send("POST", "/tokenize", body), body.get("model"))

    async def models(self) -> list[dict]:
        return _json_or_raise(await self._send("GET", "/v1/models"))["data"]

    async def health(self) -> bool:
        try:
            async with self._http().get(
                f"{self.base_url}/health", timeout=aiohttp.ClientTimeout(total=2.0)
            ) as response:
                return response.status == 200
        except (TimeoutError, aiohttp.ClientError):
            return False

    async def load_adapter(self, name: str, path: str) -> None:
        _raise_for_status(await self._send("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}))

    async def unload_adapter(self, name: str) -> None:
        _raise_for_status(await self._send("POST", "/v1/unload_lora_adapter", {"lora_name": name}))

    async def close(self) -> None:
        if self._answers is not None:
            self._answers.close()
        if self._session is not None:
            await self._session.close()

    async def _open_stream(self, path: str, body: dict) -> EngineStream:
        if self._answers is not None:
            data = encoded(body)

            async def lean() -> EngineStream | EngineResponse:
                status, answer = await self._answers.stream(path, data)
                return (
                    EngineResponse(status, answer) if isinstance(answer, bytes) else EngineStream(answer, self.base_url)
                )

            answer = await self._attempts(lean)
        else:

            async def opened(response: aiohttp.ClientResponse) -> EngineStream | EngineResponse:
                if response.status >= 400:
                    return EngineResponse(response.status, await response.read())
                return EngineStream(AiohttpBody(response), self.base_url)

            answer = await self._request("POST", path, body, opened, keep_open=True)
        if isinstance(answer, EngineResponse):
            raise _engine_error(answer, body.get("model"))
        return answer

    async def _send(self, method: str, path: str, body: dict | None = None) -> EngineResponse:
        async def read(response: aiohttp.ClientResponse) -> EngineResponse:
            return EngineResponse(response.status, await response.read())

        return await self._request(method, path, body, read)

    async def _answered(self, path: str, body: dict) -> EngineResponse:
        """A POST whose answer is read whole: on the lean connections where the engine is plain HTTP."""
        if self._answers is None:
            return await self._send("POST", path, body)
        data = encoded(body)

        async def attempt() -> EngineResponse:
            return EngineResponse(*await self._answers.post(path, data))

        return await self._attempts(attempt)

    def _url(self, path: str) -> URL:
        if path not in self._urls:
            self._urls[path] = URL(f"{self.base_url}{path}")
        return self._urls[path]

    async def _request(self, method: str, path: str, body: dict | None, handle, keep_open: bool = False):
        """``handle(response)`` of the engine's answer, retrying a connection that never reached it.

        With ``keep_open`` the response stays open when ``handle`` returns (a stream being read);
        ``EngineStream.close`` releases it.
        """
        data = None if body is None else encoded(body)
        headers = {"content-type": "application/json"} if data is not None else None

        async def attempt():
            response = await self._http().request(method, self._url(path), data=data, headers=headers)
            try:
                handled = await handle(response)
            except BaseException:
                response.close()
                raise
            if not (keep_open and isinstance(handled, EngineStream)):
                response.release()
            return handled

        return await self._attempts(attempt)

    async def _attempts(self, attempt):
        """``attempt()``, again after a transport error that means the request never reached a working
        engine (``RETRYABLE``, with backoff); the engine's failures as the gateway's errors."""
        for count, delay in enumerate((*RETRY_DELAYS_S, None)):
            try:
                return await attempt()
            except TimeoutError as exc:  # before RETRYABLE: a TimeoutError is an OSError too
                timeout = EngineTimeout(
                    f"the engine did not answer within {self.timeout_s:g} s; it may be hung or overloaded "
                    f"(the limit is `harnessrl serve --engine-timeout SECONDS`)"
                )
                raise logged(timeout, self.base_url, exc) from exc
            except RETRYABLE as exc:
                if delay is None:
                    unreachable = EngineUnavailable(
                        f"the engine is unreachable after {count + 1} attempts ({type(exc).__name__}); "
                        f"check that it is running (harnessrl serve starts one, --engine-url points at "
                        f"another; the gateway's log names its URL)"
                    )
                    raise logged(unreachable, self.base_url, exc) from exc
                await asyncio.sleep(delay)
            except (aiohttp.ClientError, BrokenAnswer) as exc:
                failed = EngineUnavailable(f"the engine failed: {type(exc).__name__}")
                raise logged(failed, self.base_url, exc) from exc
        raise AssertionError("unreachable")


def encoded(body) -> bytes:
    """JSON bytes (``store.json_text``: orjson, the standard encoder for what orjson refuses). Token id
    arrays (``gateway.engine.token_prefix``) are written as lists; an ``EncodedBody`` is its JSON."""
    return body.data if type(body) is EncodedBody else json_bytes(body)


def _raise_for_status(response: EngineResponse, model: str | None = None) -> None:
    if response.status >= 400:
        raise _engine_error(response, model)


def _json_or_raise(response: EngineResponse, model: str | None = None, loads=orjson.loads) -> dict:
    _raise_for_status(response, model)
    try:
        return loads(response.body)
    except ValueError:
        raise EngineError(502, f"engine answered with invalid JSON: {response.text[:200]}") from None


def _answer_or_raise(response: EngineResponse, model: str | None = None) -> dict:
    """A sampled answer: its prompt ids read with the call's hint (``gateway.engine.token_prefix``)."""
    return _json_or_raise(response, model, loads_answer)


def _engine_error(response: EngineResponse, model: str | None = None) -> EngineError:
    """Pass the engine's own message on, whatever shape it came in."""
    message, kind = response.text, None
    try:
        body = json.loads(response.text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            message = str(error.get("message") or error.get("detail") or message)
            kind = error.get("type")
        elif isinstance(error, str):
            message = error
    if response.status == 404 and "does not exist" in message:  # vLLM: "The model `X` does not exist."
        return ModelNotLoaded(f"engine: {message}", model)
    if response.status < 500:  # the engine's word on the request (context length, bad parameter): the client's
        return EngineError(response.status, f"engine: {message}", kind)
    return engine_failed(f"HTTP {response.status}", message)
