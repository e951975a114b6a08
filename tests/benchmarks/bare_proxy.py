"""The least a recording proxy written in Python does per call: the floor under the gateway's CPU per call.

Run: `.venv/bin/python -m tests.benchmarks.bare_proxy --port P --engine-url URL --database FILE`
(tests/benchmarks/gateway_floor.py starts it beside the gateway).

Per Chat Completions call it does only what recording one needs, on the same libraries the gateway
runs on (uvloop, httptools, orjson, numpy, sqlite3): parse the client's HTTP request and its JSON
body; ask the engine for the token ids and log-probs on one kept-alive connection; parse the answer;
insert the call (the request, the answer without its id arrays, the prompt ids, output ids and
log-probs as binary columns) into SQLite in WAL mode with ``synchronous=NORMAL`` and commit it before
answering (as the gateway: an answered call is stored); answer the client the engine's body without
the ids. No identity, policy, validation, call graph, limits, metrics, retries or streaming: what it
costs is what any Python proxy pays for the sockets, the parsing, the arrays and the row.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import time

import httptools
import numpy as np
import orjson
import uvloop
from yarl import URL

from tests.benchmarks.peer_servers import RECORDING

SCHEMA = """CREATE TABLE IF NOT EXISTS calls (id INTEGER PRIMARY KEY, request BLOB NOT NULL, response BLOB NOT NULL,
prompt_ids BLOB NOT NULL, output_ids BLOB NOT NULL, output_logprobs BLOB NOT NULL, created_at REAL NOT NULL)"""
INSERT = "INSERT INTO calls (request, response, prompt_ids, output_ids, output_logprobs, created_at) VALUES (?, ?, ?, ?, ?, ?)"


class HttpMessages(asyncio.Protocol):
    """A connection whose messages httptools parses (``parser`` set by the subclass); bodies gathered."""

    parser: httptools.HttpRequestParser | httptools.HttpResponseParser

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport, self.body = transport, []

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def taken_body(self) -> bytes:
        body, self.body = b"".join(self.body), []
        return body


class EngineConnection(HttpMessages):
    """One kept-alive HTTP/1.1 connection to the engine; one request at a time."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.answer: asyncio.Future[bytes] | None = None

    def on_message_complete(self) -> None:
        answer, self.answer = self.answer, None
        answer.set_result(self.taken_body())

    def post(self, head: bytes, body: bytes) -> asyncio.Future[bytes]:
        self.answer = asyncio.get_running_loop().create_future()
        self.transport.write(head + str(len(body)).encode() + b"\r\n\r\n" + body)
        return self.answer


class Engine:
    """Kept-alive connections to the engine's chat route, opened as needed."""

    def __init__(self, url: str):
        parsed = URL(url)
        self.host, self.port = parsed.host, parsed.port
        self.head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
            "content-type: application/json\r\ncontent-length: "
        ).encode()
        self.idle: list[EngineConnection] = []

    async def chat(self, body: bytes) -> bytes:
        while self.idle and self.idle[-1].transport.is_closing():  # the engine closed it (its keep-alive timeout)
            self.idle.pop()
        if self.idle:
            connection = self.idle.pop()
        else:
            _, connection = await asyncio.get_running_loop().create_connection(EngineConnection, self.host, self.port)
        answer = await connection.post(self.head, body)
        self.idle.append(connection)
        return answer


class Recorder:
    """The calls table, written on the event loop's thread (as the gateway's inline SQLite commit)."""

    def __init__(self, path: str):
        self.connection = sqlite3.connect(path, isolation_level=None)
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL"):
            self.connection.execute(f"PRAGMA {pragma}")
        self.connection.execute(SCHEMA)

    def record(self, request: bytes, answer: dict) -> None:
        choice = answer["choices"][0]
        prompt = np.asarray(answer.pop("prompt_token_ids"), dtype="<i4")
        output = np.asarray(choice.pop("token_ids"), dtype="<i4")
        logprobs = np.asarray([entry["logprob"] for entry in choice["logprobs"]["content"]], dtype="<f4")
        row = (request, orjson.dumps(answer), prompt.tobytes(), output.tobytes(), logprobs.tobytes(), time.time())
        self.connection.execute("BEGIN")
        self.connection.execute(INSERT, row)
        self.connection.execute("COMMIT")


class ClientConnection(HttpMessages):
    """A client's kept-alive connection: each request forwarded, recorded and answered in turn."""

    def __init__(self, engine: Engine, recorder: Recorder):
        self.engine, self.recorder = engine, recorder
        self.parser = httptools.HttpRequestParser(self)

    def on_message_complete(self) -> None:
        request = self.taken_body()
        if self.parser.get_method() != b"POST":  # a readiness check
            self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            return
        asyncio.get_running_loop().create_task(self.answer(request))

    async def answer(self, request: bytes) -> None:
        try:
            body = orjson.loads(request)
            answer = orjson.loads(await self.engine.chat(orjson.dumps({**body, **RECORDING})))
            self.recorder.record(request, answer)
        except Exception as exc:  # an answer the load generator reports, not a hang
            self.respond(b"502 Bad Gateway", orjson.dumps({"error": {"message": repr(exc)}}))
            return
        self.respond(b"200 OK", orjson.dumps(answer))  # the ids were popped into their columns

    def respond(self, status: bytes, body: bytes) -> None:
        head = b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: "
        self.transport.write(head + str(len(body)).encode() + b"\r\n\r\n" + body)


async def serve(port: int, engine_url: str, database: str) -> None:
    engine, recorder = Engine(engine_url), Recorder(database)
    server = await asyncio.get_running_loop().create_server(
        lambda: ClientConnection(engine, recorder), "127.0.0.1", port
    )
    await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--engine-url", required=True)
    parser.add_argument("--database", required=True)
    args = parser.parse_args()
    uvloop.run(serve(args.port, args.engine_url, args.database))


if __name__ == "__main__":
    main()
