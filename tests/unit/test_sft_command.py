"""`harnessrl sft`: the run's successful rollouts (recorded through a real gateway in front of the
scripted engine) train a LoRA adapter on the tiny model, published as the next policy version."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from openai import OpenAI
from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.server import BackgroundGateway
from harnessrl.training.sft import successful_samples
from store.store import Store
from tests import http_calls as http
from tests.builders import TEST_ADMIN_KEY, gateway_settings
from tests.fake_tokens import FakeReply

ADMIN = {"x-admin-key": TEST_ADMIN_KEY}


@pytest.fixture
def recorded(sqlite_db, fake_engine, fake_engine_server) -> Iterator[BackgroundGateway]:
    """Run "teach": group g1 rewards 1.0 and 0.0, group g2 rewards 0.5 and 0.8, one failed rollout."""
    fake_engine.script = lambda body: FakeReply(content="The answer is 7.")
    with BackgroundGateway(gateway_settings(sqlite_db, fake_engine_server.url)) as gateway:
        http = httpx.Client(base_url=gateway.url, headers=ADMIN, timeout=30)
        for group, reward, status in (
            ("g1", 1.0, "finished"),
            ("g1", 0.0, "finished"),
            ("g2", 0.5, "finished"),
            ("g2", 0.8, "finished"),
            ("g3", 1.0, "failed"),
        ):
            rollout = http.post(
                "/api/rollouts", json={"run": "teach", "task": group, "group": group, "group_size": 2}
            ).json()
            OpenAI(base_url=rollout["base_url"], api_key=rollout["token"], max_retries=0).chat.completions.create(
                model="policy", messages=[{"role": "user", "content": f"What is 3 + 4? ({group}, {reward})"}]
            )
            http.post(f"/api/rollouts/{rollout['id']}/end", json={"status": status, "rewards": {"v": reward}})
        yield gateway


async def test_successes_are_the_finished_rollouts_at_the_threshold_or_the_best_of_each_group(recorded, sqlite_db):
    store = Store.from_url(sqlite_db)
    try:
        assert (await successful_samples(store, "teach", 1.0))[1] == 1  # g1's 1.0; the failed one never counts
        assert (await successful_samples(store, "teach", 0.5))[1] == 3
        samples, rollouts = await successful_samples(store, "teach", 0.5, best_of_group=True)
    finally:
        await store.close()
    assert rollouts == 2 and len(samples) == 2  # g1's 1.0 and g2's 0.8
    assert all(s.loss_mask.sum() > 0 and s.loss_mask[0] == 0 for s in samples)  # prompts are not trained on


def test_sft_trains_an_adapter_and_publishes_it_as_the_next_policy_version(
    recorded, sqlite_db, tiny_model_dir, tmp_path
):
    args = [
        "sft",
        "--run",
        "teach",
        "--min-reward",
        "0.5",
        "--model",
        str(tiny_model_dir),
        "--database-url",
        sqlite_db,
        "--out",
        str(tmp_path / "sft"),
        "--epochs",
        "3",
        "--token-budget",
        "1024",
        "--samples-per-step",
        "3",
        "--lr",
        "1e-3",
        "--publish",
        recorded.url,
        "--admin-key",
        TEST_ADMIN_KEY,
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "trained on 3 samples of 3 rollouts" in result.output and "published as policy-v1" in result.output
    adapter = tmp_path / "sft" / "adapter"
    assert (adapter / "adapter_config.json").exists() and (adapter / "adapter_model.safetensors").exists()
    summary = json.loads((tmp_path / "sft" / "sft.json").read_text())
    steps = summary["steps"]  # three samples per step: one step per epoch
    assert len(steps) == 3 and all(s["tokens"] > 0 for s in steps) and steps[-1]["loss"] < steps[0]["loss"]
    policy = http.get(f"{recorded.url}/admin/policy", headers=ADMIN).json()
    assert policy["current_version"] == 1


def test_sft_without_successes_says_what_to_do(recorded, sqlite_db, tiny_model_dir, tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "sft",
            "--run",
            "teach",
            "--min-reward",
            "5",
            "--model",
            str(tiny_model_dir),
            "--database-url",
            sqlite_db,
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 1 and "nothing to imitate" in " ".join(result.output.split())
    result = CliRunner().invoke(
        app,
        ["sft", "--run", "nope", "--model", str(tiny_model_dir), "--database-url", sqlite_db, "--out", str(tmp_path)],
    )
    assert result.exit_code == 1 and "no run named 'nope'" in " ".join(result.output.split())
