"""Rollout start-to-first-call and teardown: Harbor's podman environments versus our docker backend.

Run: `.venv/bin/python tests/benchmarks/sandbox_backends.py [--rounds 3] [--out FILE]` (needs `make harbor`,
podman, dockerd and the pi harness image). Writes JSON to tests/benchmarks/results/sandbox_backends.json.

Both backends run the same thing side by side, in alternating rounds after one warm-up each (podman's
copy of an image from Docker happens once, in the warm-up):

- **sandbox**: a sandbox of the pi harness image is created, a one-shot client in it (python3) makes one
  chat call to the gateway; measured: create (start of the environment), first call (from the create's
  start to the call's arrival at the engine behind the gateway), one exec's round trip, close (teardown).
- **rollout**: pi itself on the csv-total Harbor task (its image built from its Dockerfile, pi derived
  into it), through the runner, with a scripted engine: from the rollout's start to pi's first call, and
  from pi's last call to the rollout's end (the verifier's fresh environment, grading, both teardowns).

docker reaches the gateway through its bridge (loopback in a container without a network);
harbor:podman at the gateway's public URL on an internal podman network whose one route out is a relay
(tests/remote_network.py), as a remote provider's sandbox would. Medians in seconds, and harbor/docker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
from harnesses.agents import create  # noqa: E402
from harnesses.task import load_harbor  # noqa: E402
from harnessrl.server import BackgroundGateway, BackgroundServer  # noqa: E402
from migrations.runner import upgrade  # noqa: E402
from sandboxes import SandboxSpec, create_sandbox  # noqa: E402
from store.database import sqlite_url  # noqa: E402
from tests.agent_scripts import write_then_done  # noqa: E402
from tests.builders import gateway_settings, run_single_rollout  # noqa: E402
from tests.fake_engine import FakeEngine, create_fake_engine_app  # noqa: E402
from tests.fake_tokens import FakeReply  # noqa: E402
from tests.remote_network import remote_network  # noqa: E402

DEFAULT_OUT = Path(__file__).parent / "results" / "sandbox_backends.json"
ROOT = Path(__file__).resolve().parents[2]
IMAGE = "harnessrl/pi:latest"
TASK = load_harbor(ROOT / "tests" / "fixtures" / "harbor_public" / "csv-total")
ONE_CALL = (
    "import json, os, sys, urllib.request; url = sys.argv[1]; body = json.dumps({'model': 'policy', "
    "'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 4}).encode(); "
    "urllib.request.urlopen(urllib.request.Request(url + '/chat/completions', body, "
    "{'Content-Type': 'application/json'}), timeout=60).read()"
)


class Stamps:
    """The engine's script, noting when each call arrived."""

    def __init__(self, script=None) -> None:
        self.script, self.times = script, []

    def __call__(self, body: dict) -> FakeReply:
        self.times.append(time.monotonic())
        return self.script(body) if self.script else FakeReply(content="ok")


async def sandbox_round(kind: str, gateway: BackgroundGateway, engine: FakeEngine, options: dict) -> dict:
    from contracts.gateway_client import GatewayClient
    from tests.builders import TEST_ADMIN_KEY

    client = GatewayClient(gateway.url, TEST_ADMIN_KEY)
    try:
        rollout = await client.create_rollout("bench", f"t{time.monotonic_ns()}", "g", 1, {})
    finally:
        await client.close()
    base_url = rollout["base_url"]  # loopback for docker's bridge, the public URL for harbor
    engine.script = stamps = Stamps()
    started = time.monotonic()
    sandbox = await create_sandbox(kind, SandboxSpec(image=IMAGE, gateway_url=base_url), **options)
    created = time.monotonic()
    called = await sandbox.exec(["python3", "-c", ONE_CALL, sandbox.gateway_url_inside], timeout_s=120)
    assert called.ok, called.text()
    exec_started = time.monotonic()
    await sandbox.exec(["true"])
    exec_done = time.monotonic()
    await sandbox.close()
    return {
        "create_s": created - started,
        "first_call_s": stamps.times[0] - started,
        "exec_s": exec_done - exec_started,
        "close_s": time.monotonic() - exec_done,
    }


async def rollout_round(kind: str, gateway: BackgroundGateway, engine: FakeEngine, options: dict) -> dict:
    engine.script = stamps = Stamps(write_then_done("/app/total.txt", "42\n", side_reply="Sum of sales"))
    started = time.monotonic()
    result = await run_single_rollout(
        create("pi", kind), gateway.url, f"bench-{time.monotonic_ns()}", TASK, kind, options
    )
    ended = time.monotonic()
    assert (result.status, result.reward) == ("finished", 1.0), result.error
    return {"first_call_s": stamps.times[0] - started, "last_call_to_end_s": ended - stamps.times[-1]}


def medians(rows: list[dict]) -> dict:
    return {key: round(statistics.median(row[key] for row in rows), 3) for key in rows[0]}


def measure(rounds: int) -> dict:
    engine = FakeEngine(model="fake-base", max_model_len=1_000_000)
    found: dict[str, dict[str, list[dict]]] = {k: {"sandbox": [], "rollout": []} for k in ("docker", "harbor:podman")}
    folder = Path(tempfile.mkdtemp(prefix="harnessrl-bench-"))
    stores = {}
    for name in ("docker", "harbor"):
        stores[name] = sqlite_url(folder / f"{name}.db")
        upgrade(stores[name])
    with (
        BackgroundServer(create_fake_engine_app(engine)) as engine_server,
        remote_network() as network,
        # docker's bridge connects to the gateway on loopback; harbor reaches it at its public URL
        BackgroundGateway(gateway_settings(stores["docker"], engine_server.url)) as local,
        BackgroundGateway(
            gateway_settings(stores["harbor"], engine_server.url, public_url=network.public_url)
        ) as public,
    ):
        network.gateway_port[:] = [int(public.url.rsplit(":", 1)[1])]
        backends = {"docker": (local, {}), "harbor:podman": (public, network.options())}
        for round_ in range(rounds + 1):  # round 0 warms up (images copied, layers cached)
            for kind, (gateway, options) in backends.items():
                sandbox = asyncio.run(sandbox_round(kind, gateway, engine, options))
                rollout = asyncio.run(rollout_round(kind, gateway, engine, options))
                if round_:
                    found[kind]["sandbox"].append(sandbox)
                    found[kind]["rollout"].append(rollout)
                print(f"round {round_} {kind}: {sandbox} {rollout}", flush=True)
    result = {kind: {part: medians(rows) for part, rows in parts.items()} for kind, parts in found.items()}
    result["harbor_over_docker"] = {
        part: {
            key: round(result["harbor:podman"][part][key] / result["docker"][part][key], 2)
            for key in result["docker"][part]
        }
        for part in ("sandbox", "rollout")
    }
    return {"rounds": rounds, "image": IMAGE, "task": TASK.name, "medians_s": result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    document = measure(args.rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1))
    print(json.dumps(document, indent=1))


if __name__ == "__main__":
    main()
