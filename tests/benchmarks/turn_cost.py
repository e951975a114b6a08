"""Gateway CPU per turn as a rollout's history grows from ~1k to ~32k tokens.

Three ways to get a turn's prompt ids: ``engine`` (vLLM renders; the gateway forwards and records),
``tito`` (the gateway renders turn by turn and splices sampled ids) and ``naive`` (the gateway
re-renders and re-tokenizes the whole history every turn). Each turn runs the gateway's real
pipeline (parse, validate, render, record to SQLite, answer) against a stub engine, and is timed
with process CPU time: the engine client's side (encoding the request, reading the JSON answer) is
counted, the stub's own writing of its answer is not. The turns timed at each size all add the same
short message (``run_mode``), and each starts with the CPU caches evicted (``evict_caches``; the
warm figures are reported beside). Run:
`.venv/bin/python tests/benchmarks/turn_cost.py [--out FILE] [--repeats N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

import numpy as np  # noqa: E402
import orjson  # noqa: E402

from gateway.engine.client import encoded  # noqa: E402
from gateway.engine.token_prefix import loads_answer  # noqa: E402
from gateway.openai.serving import OpenAIServing  # noqa: E402
from gateway.policy.policy_set import PolicySet  # noqa: E402
from gateway.recording.call_books import CallBooks  # noqa: E402
from gateway.recording.callgraph import CallGraphIndex  # noqa: E402
from gateway.recording.pipeline import ChatPipeline  # noqa: E402
from gateway.request.resent_bodies import ResentBodies  # noqa: E402
from gateway.tito.renderer import RenderedPrompt, for_template  # noqa: E402
from gateway.tito.serving import TitoEngine  # noqa: E402
from gateway.tito.template import ModelText  # noqa: E402
from migrations.runner import upgrade  # noqa: E402
from store.database import sqlite_url  # noqa: E402
from store.rollout_asks import AskedSettings  # noqa: E402
from store.store import Store  # noqa: E402
from store.writer import CallWriter  # noqa: E402

DEFAULT_OUT = Path(__file__).parent / "results" / "turn_cost.json"
TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}
PROBE_TURNS = 9  # timed turns at each reported size
PROBE_WORDS = 8  # the tool output a probe turn adds (the growing turns add 420 words, ~1k tokens)
EVICT_BYTES = 64 << 20  # twice this machine's L3 (32 MiB; L2 1 MiB a core)
REPORT_AT = (1024, 2048, 4096, 8192, 16384, 32768)
# Probe turns at this size are run and not reported: a process's first turns pay once for what later
# turns find ready (the store's first pages, first-use paths), which made the 1k point the dearest.
WARM_UP_AT = 512
WORDS = "def return import class self value result error test file path line data index list".split()


def tool_output(n: int, words: int = 420) -> str:
    return " ".join(WORDS[(n * 7 + i) % len(WORDS)] + str(i % 10) for i in range(words))


class StubEngine:
    """Answers instantly: a tool call as text (completions) or as a parsed message (chat).

    Between the gateway and this stub, what the engine client does on the gateway's side happens as
    over HTTP: the request body is encoded and the answer read from JSON bytes (``loads_answer``, as
    ``VLLMEngineClient`` reads it); writing the answer is the engine's work, so its CPU time is kept
    in ``engine_cpu_s`` and left out of the turn's.
    """

    def __init__(self, text: ModelText):
        self.text, self.turn = text, 0
        self.prompt_ids, self.prompt_json = [], b"[]"  # set before each turn: vLLM's rendering, not the gateway's
        self.engine_cpu_s = 0.0

    def _over_the_wire(self, body: dict, answer: Callable[[list[int]], dict]) -> dict:
        encoded(body)  # the engine client sends the body
        started = time.process_time()
        ids = self.text.encode(self.sampled_text()) + [self.text.eos_id]  # the engine samples
        raw = orjson.dumps(answer(ids))  # and writes its answer (compact, as vLLM does)
        self.engine_cpu_s += time.process_time() - started
        return loads_answer(raw)  # the engine client reads it

    def sampled_text(self) -> str:
        return f'<tool_call>\n{{"name": "read_file", "arguments": {{"path": "f{self.turn}.py"}}}}\n</tool_call>'

    async def completions(self, body: dict) -> dict:
        return self._over_the_wire(
            body,
            lambda ids: {
                "choices": [
                    {
                        "index": 0,
                        "text": "",
                        "finish_reason": "stop",
                        "token_ids": ids,
                        "prompt_token_ids": body["prompt"].tolist(),
                        "logprobs": {"tokens": ["t"] * len(ids), "token_logprobs": [-0.5] * len(ids)},
                    }
                ],
                "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)},
            },
        )

    async def chat(self, body: dict) -> dict:
        call = {
            "id": f"call_{self.turn}",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"f{self.turn}.py"})},
        }
        return self._over_the_wire(
            body,
            lambda ids: {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                        "logprobs": {"content": [{"token": "t", "logprob": -0.5}] * len(ids)},
                        "finish_reason": "tool_calls",
                        "token_ids": ids,
                    }
                ],
                "usage": {"prompt_tokens": len(self.prompt_ids), "completion_tokens": len(ids)},
                "prompt_token_ids": orjson.Fragment(self.prompt_json),
            },
        )


class NaiveTito(TitoEngine):
    """Re-renders and re-tokenizes the whole history every turn (what incremental rendering avoids)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.renderer.prompt_ids = self._whole

    def _whole(self, messages: list[dict], tools: list[dict] | None, state) -> RenderedPrompt:
        ids = self.text.encode(
            self.text.template.render([for_template(m) for m in messages], tools, add_generation_prompt=True)
        )
        unknown = np.zeros(len(ids), np.uint8)  # naive re-rendering places no contents: every role UNKNOWN
        return RenderedPrompt(np.asarray(ids, "<i4"), (orjson.dumps(ids),), unknown, unplaced=1)


@functools.cache
def eviction_buffer() -> np.ndarray:
    return np.zeros(EVICT_BYTES // 8)


def evict_caches() -> None:
    """Write over more memory than the CPU caches hold, so every turn starts as cold as the last.

    Between two turns of a rollout a gateway serves other rollouts, so a turn meets caches full of
    other work whatever its history. Here nothing else runs, and what comes between two turns grows
    with the history (the stub engine renders and tokenizes the whole conversation, the agent encodes
    it): left alone, late turns would start colder than early ones and look dearer for it.
    """
    eviction_buffer()[:] += 1.0


async def run_mode(
    mode: str, text: ModelText, workdir: Path, prompts: list[list[int]], cold: bool = True
) -> list[tuple[int, float]]:
    """(reported size, gateway CPU ms) for each probe turn of one conversation; ``cold``:
    ``evict_caches`` before each turn. ``prompts`` (engine mode): the engine's prompt ids for each
    turn; a turn past its end is rendered before its clock starts and appended (``rehearse``).

    The conversation grows by a ~1k-token tool output a turn; once its history reaches a reported size,
    ``PROBE_TURNS`` turns each add a short one (``PROBE_WORDS`` words) and are timed. Every probe turn
    brings the same new work, so what differs between sizes is the cost of the resent history alone,
    and nine of them at each size steady the median."""
    url = sqlite_url(workdir / f"{mode}.db")
    upgrade(url)
    store = Store.from_url(url)
    writer = CallWriter(store)
    writer.start()
    engine = StubEngine(text)
    tito_engine = (NaiveTito if mode == "naive" else TitoEngine)(text, engine, store.calls.recent_outputs)

    async def tito() -> TitoEngine:
        return tito_engine

    pipeline = ChatPipeline(
        engine,
        PolicySet("policy", "base"),
        writer,
        CallBooks(CallGraphIndex(store.calls.graph_nodes)),
        tito=tito,
        max_model_len=200_000,
    )
    settings = AskedSettings(capture="engine" if mode == "engine" else "tito")
    identity = await store.create_rollout(f"bench-{mode}", "t", settings=settings)
    serving = OpenAIServing(pipeline)
    bodies = ResentBodies()  # the chat route's body parser (its rollout's resent history parsed once)
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix the bug."}]
    points, history, sizes, probed = [], 0, [WARM_UP_AT, *REPORT_AT], 0
    while sizes:
        body = json.dumps({"model": "policy", "messages": messages, "tools": [TOOL], "max_tokens": 64}).encode()
        if mode == "engine":  # the engine's rendering is not gateway work: done before the clock
            if engine.turn == len(prompts):
                prompts.append(text.encode(text.template.render([for_template(m) for m in messages], [TOOL], True)))
            engine.prompt_ids = prompts[engine.turn]
            engine.prompt_json = orjson.dumps(engine.prompt_ids)
        if cold:
            evict_caches()
        started, engine_before = time.process_time(), engine.engine_cpu_s
        served = await serving.chat(bodies.parse(body, identity.rollout_id, check_depth=False), identity)
        json.dumps(served.body)
        spent = time.process_time() - started - (engine.engine_cpu_s - engine_before)
        probing = history >= sizes[0]
        if probing:
            points.append((sizes[0], spent * 1000.0))
            probed += 1
            if probed == PROBE_TURNS:
                sizes.pop(0)
                probed = 0
        message = served.body["choices"][0]["message"]
        call = message["tool_calls"][0]
        # The agent echoes the call back re-serialized, then appends the tool's output.
        call = {
            **call,
            "function": {
                **call["function"],
                "arguments": json.dumps(json.loads(call["function"]["arguments"]), separators=(",", ":")),
            },
        }
        messages += [
            {"role": "assistant", "content": message.get("content"), "tool_calls": [call]},
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "content": tool_output(engine.turn, PROBE_WORDS if probing else 420),
            },
        ]
        engine.turn += 1
        history = served.body["usage"]["prompt_tokens"]
    await writer.stop()
    await store.close()
    return points


def rehearse(mode: str, text: ModelText, workdir: Path) -> list[list[int]]:
    """The engine's prompt ids for each turn of the conversation, from one untimed run of it.

    Rendering a turn's prompt is vLLM's work, in vLLM's process. Done in the gateway's process before
    each timed turn, tokenizing the whole history (megabytes of Python ints a turn at 32k tokens)
    churned the gateway's heap, and every later turn paid for it: ~0.5 ms a turn at 32k, which
    rendering them once beforehand takes away. The conversation is deterministic, so the timed runs
    send the very messages these prompts were rendered from."""
    prompts: list[list[int]] = []
    if mode == "engine":
        asyncio.run(run_mode(mode, text, workdir, prompts))
    return prompts


def at_sizes(points: list[tuple[int, float]]) -> dict[int, float]:
    """CPU ms per turn at each reported size: the median of its probe turns (one turn alone is at the
    mercy of a garbage collection or a neighbour's burst on shared cores)."""
    return {size: statistics.median(ms for at, ms in points if at == size) for size in REPORT_AT}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", type=Path, help="model folder (default: a tiny model built now)")
    parser.add_argument("--modes", default="engine,tito,naive", help="comma-separated: engine, tito, naive")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="harnessrl-turn-cost-"))
    if args.model is None:
        from harnessrl.engine.model_prep import build_tiny_model

        args.model = build_tiny_model(workdir / "tiny")
    text = ModelText(args.model)
    report = {}
    for mode in args.modes.split(","):
        workdir.joinpath(f"{mode}-rehearsal").mkdir(parents=True)
        prompts = rehearse(mode, text, workdir / f"{mode}-rehearsal")
        for caches in ("cold", "warm"):
            points = []
            for r in range(args.repeats):
                folder = workdir / f"{mode}-{caches}-{r}"
                folder.mkdir(parents=True)
                points += asyncio.run(run_mode(mode, text, folder, prompts, cold=caches == "cold"))
            per_size = {size: round(ms, 3) for size, ms in at_sizes(points).items()}
            report.setdefault(mode, {})[caches] = {
                "cpu_ms_per_turn": per_size,
                "ratio_32k_to_1k": round(per_size[32768] / per_size[1024], 2),
            }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "turn_cost", "model": str(args.model), "results": report}, indent=2))
    print(f"{'mode':<14}" + "".join(f"{size:>9}" for size in REPORT_AT) + f"{'32k/1k':>9}")
    for mode, by_caches in report.items():
        for caches, row in by_caches.items():
            print(
                f"{mode + ' (' + caches + ')':<14}"
                + "".join(f"{row['cpu_ms_per_turn'][s]:>9.2f}" for s in REPORT_AT)
                + f"{row['ratio_32k_to_1k']:>9.2f}"
            )
    print(
        f"CPU ms per turn by history size (tokens), the median of {PROBE_TURNS} probe turns a size and run;"
        f" cold: caches evicted before each turn. Written to {args.out}"
    )


if __name__ == "__main__":
    main()
