"""Bytes a rollout stores as its turns grow: what each call adds beyond its parent, against whole copies.

One agent rollout through the real gateway (in process, SQLite, the fake engine on a loopback socket):
each turn resends the whole history plus one new tool result, so by turn 50 the history is ~30k tokens
(the fake engine's tokens are bytes). After the run the calls' stored bytes are read from the database
(prompt ids, output ids, logprobs, request and response as stored) and set against what storing every
call whole costs (whole prompt ids, the request as received): the layout before request and prompt
deltas. Printed and written as JSON: both totals at turns 10, 20, ..., 50, and each one's bytes per turn
over the last ten turns (constant: linear in turns; growing: quadratic).

Run: `.venv/bin/python tests/benchmarks/rollout_bytes.py [--turns 50] [--history-tokens 30000] [--out FILE]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

from harnessrl.server import BackgroundServer  # noqa: E402
from migrations.runner import upgrade  # noqa: E402
from store.database import sqlite_url  # noqa: E402
from tests.builders import gateway_settings  # noqa: E402
from tests.fake_engine import FakeEngine, create_fake_engine_app  # noqa: E402
from tests.gateway_harness import start_gateway  # noqa: E402

DEFAULT_OUT = Path(__file__).parent / "results" / "rollout_bytes.json"
SYSTEM = "You are a coding agent. " * 200  # ~5k tokens, resent on every turn like a real agent's
STORED = (
    "SELECT length(prompt_ids) + length(output_ids) + length(output_logprobs)"
    " + length(CAST(request AS BLOB)) + length(CAST(response AS BLOB)) FROM calls ORDER BY id"
)


async def play(database_url: str, engine_url: str, fake: FakeEngine, turns: int, per_turn: int) -> list[int]:
    """The rollout; per call, the bytes it would store whole (prompt ids, request as received, the rest)."""
    whole = []
    async for gateway in start_gateway(gateway_settings(database_url, engine_url), fake):
        rollout = await gateway.new_rollout()
        client = gateway.openai(api_key=rollout["token"])
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "fix the failing test"}]
        for turn in range(turns):
            reply = await client.chat.completions.create(model="policy", messages=messages, max_tokens=32)
            messages += [
                {"role": "assistant", "content": reply.choices[0].message.content},
                {"role": "user", "content": f"tool output {turn}: " + "log line " * (per_turn // 9)},
            ]
        calls = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls", params={"limit": 1000})).json()
        for call in calls["data"]:
            detail = (await gateway.http.get(f"/api/calls/{call['id']}")).json()
            whole.append(
                4 * (len(detail["prompt_ids"]) + len(detail["output_ids"]) + len(detail["output_logprobs"]))
                + len(json.dumps(detail["request"], separators=(",", ":")))
                + len(json.dumps(detail["response"], separators=(",", ":")))
            )
    return whole


def report(stored: list[int], whole: list[int], history_tokens: list[int]) -> dict:
    rows = []
    for turn in range(10, len(stored) + 1, 10):
        rows.append(
            {
                "turns": turn,
                "history_tokens": history_tokens[turn - 1],
                "stored_bytes": sum(stored[:turn]),
                "whole_bytes": sum(whole[:turn]),
            }
        )
    last = slice(-10, None)
    return {
        "rows": rows,
        "stored_bytes_per_turn_first_10": sum(stored[:10]) / 10,
        "stored_bytes_per_turn_last_10": sum(stored[last]) / 10,
        "whole_bytes_per_turn_first_10": sum(whole[:10]) / 10,
        "whole_bytes_per_turn_last_10": sum(whole[last]) / 10,
        "ratio_whole_over_stored": sum(whole) / sum(stored),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--history-tokens", type=int, default=30_000, help="the history's size at the last turn")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    per_turn = max(16, (args.history_tokens - len(SYSTEM)) // args.turns)
    with tempfile.TemporaryDirectory() as tmp, BackgroundServer(create_fake_engine_app()) as engine:
        fake = FakeEngine(model="fake-base", max_model_len=10 * args.history_tokens)
        engine.app.state.engine = fake
        database = Path(tmp) / "bytes.db"
        upgrade(sqlite_url(database))
        whole = asyncio.run(play(sqlite_url(database), engine.url, fake, args.turns, per_turn))
        with sqlite3.connect(database) as db:
            stored = [n for (n,) in db.execute(STORED)]
            history = [n for (n,) in db.execute("SELECT num_prompt_tokens FROM calls ORDER BY id")]
    result = {"turns": args.turns, "history_tokens_at_end": history[-1], **report(stored, whole, history)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
