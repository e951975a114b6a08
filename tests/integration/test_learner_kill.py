"""`harnessrl train` as a real process, killed with SIGKILL at arbitrary moments and restarted: every
ready group is consumed exactly once, in ready order; SIGTERM stops it gracefully."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from store.listings import GroupFilter
from store.store import Store
from tests.builders import call_record
from tests.learner_reads import stored_checkpoints
from tests.waiting import until

RUN = "kill-test"
GROUPS = 20
PROMPT, OUTPUT = 500, 60  # long enough that a step takes a noticeable fraction of a second


async def fill(store: Store) -> list[int]:
    rng = np.random.default_rng(0)
    groups = []
    for g in range(GROUPS):
        rollouts = []
        for _ in range(4):
            identity = await store.create_rollout(RUN, f"task-{g}", group_size=4)
            await store.insert_calls(
                [
                    call_record(
                        identity.rollout_id,
                        prompt_ids=rng.integers(10, 1000, PROMPT).tolist(),
                        output_ids=rng.integers(10, 1000, OUTPUT).tolist(),
                        output_logprobs=[-7.6] * OUTPUT,
                    )
                ]
            )
            rollouts.append(identity.rollout_id)
        for k, rollout_id in enumerate(rollouts):
            await store.end_rollout(rollout_id, "finished", rewards={"verifier": float(k % 2)})
        groups.append((await store.get_rollout(rollouts[0]))[0].group_id)
    return groups


def start(tmp_path: Path, config: Path, url: str) -> subprocess.Popen:
    log = open(tmp_path / "train.log", "a")
    return subprocess.Popen(
        [sys.executable, "-m", "harnessrl.cli", "train", "--run", RUN, "--config", str(config), "--database-url", url],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "HARNESSRL_HOME": str(tmp_path / "home")},
    )


async def committed(store: Store) -> int:
    return len(await stored_checkpoints(store, RUN))


async def wait_for_progress(store: Store, process: subprocess.Popen, beyond: int) -> int:
    """The checkpoint count once it passed ``beyond``; a learner start (torch, the model) is slow when busy."""

    async def progressed() -> int:
        count = await committed(store)
        assert count > beyond or process.poll() is None, "the learner exited early"
        return count if count > beyond else 0

    return await until(progressed, f"a checkpoint beyond {beyond}", timeout_s=600, interval_s=0.05)


async def test_kill_9_and_restart_consume_every_group_exactly_once(database_url, tiny_model_dir, tmp_path):
    store = Store.from_url(database_url)
    try:
        groups = await fill(store)
        config = tmp_path / "learner.toml"
        config.write_text(
            f'model_dir = "{tiny_model_dir}"\nmax_steps = {GROUPS}\npoll_interval_s = 0.2\n'
            f"[batch]\ngroups_per_step = 1\nmax_staleness = 1000\n"
            f"[publish]\nenabled = false\n[checkpoint]\nevery = 2\n"
        )
        rng = random.Random(0)
        seen = 0
        for _ in range(3):  # killed at a random moment after some progress
            process = start(tmp_path, config, database_url)
            seen = await wait_for_progress(store, process, seen)
            await asyncio.sleep(rng.uniform(0.0, 1.0))
            process.send_signal(signal.SIGKILL)
            process.wait(30)
        process = start(tmp_path, config, database_url)  # a graceful stop keeps what it trained
        seen = await wait_for_progress(store, process, await committed(store))
        process.send_signal(signal.SIGTERM)  # it ends its step and checkpoints: minutes when busy
        assert process.wait(600) == 0, (tmp_path / "train.log").read_text()[-3000:]
        process = start(tmp_path, config, database_url)
        assert process.wait(900) == 0, (tmp_path / "train.log").read_text()[-3000:]

        history = await stored_checkpoints(store, RUN)
        consumed = [g for record in history for g in record.group_ids]
        assert consumed == groups  # each exactly once, in ready order, none skipped
        assert history[-1].step == GROUPS
        assert {g.status for g, _, _ in await store.listings.groups(GroupFilter(run=RUN), 0, 100)} == {"consumed"}
        assert "stopped (stopped)" in (tmp_path / "train.log").read_text()
    finally:
        await store.close()
