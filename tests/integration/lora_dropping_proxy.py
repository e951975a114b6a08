"""An engine that answers 200 to a LoRA load and never applies it: a proxy in front of a real vLLM that
keeps load and unload requests to itself, lists the "loaded" names, and serves each of them with the
base model (the failure verl #7495 and ms-swift #9855 describe: a swap that looked done and was not)."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route


def lora_dropping_proxy(engine_url: str, base_model: str) -> Starlette:
    loaded: set[str] = set()

    async def send(method: str, path: str, body=None) -> httpx.Response:
        async with httpx.AsyncClient(base_url=engine_url, timeout=300) as upstream:
            return await upstream.request(method, path, json=body)

    async def load(request: Request) -> Response:
        name = (await request.json())["lora_name"]
        loaded.add(name)
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    async def unload(request: Request) -> Response:
        loaded.discard((await request.json())["lora_name"])
        return PlainTextResponse("Success")

    async def models(_request: Request) -> Response:
        listed = (await send("GET", "/v1/models")).json()
        listed["data"] += [{"id": name, "object": "model", "parent": base_model, "root": name} for name in loaded]
        return JSONResponse(listed)

    async def forward(request: Request) -> Response:
        body = await request.json() if request.method == "POST" else None
        if isinstance(body, dict) and body.get("model") in loaded:
            body["model"] = base_model  # the adapter's name, served by the base model
        answer = await send(request.method, request.url.path, body)
        return Response(answer.content, answer.status_code, media_type=answer.headers.get("content-type"))

    paths = ("/v1/completions", "/v1/chat/completions", "/tokenize", "/health")
    return Starlette(
        routes=[
            Route("/v1/load_lora_adapter", load, methods=["POST"]),
            Route("/v1/unload_lora_adapter", unload, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            *(Route(path, forward, methods=["GET", "POST"]) for path in paths),
        ]
    )
