"""Saving adapters for checkpoints and publications: the files peft's save_pretrained writes, written once
per set of weights (a publication links its checkpoint's), and each phase of a publication timed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file

from contracts.adapter_proof import adapter_digest
from learner import adapters
from learner.adapters import WEIGHTS, activate, add_adapter, save_adapter
from learner.checkpoint import load_checkpoint, prune_checkpoints, save_checkpoint
from learner.publish import PHASE_METRICS, Published, Publisher, prepare, publication_metrics
from learner.trainer import Trainer, build_trainer, lora_config
from tests.learner_runs import tiny_learner_config


@pytest.fixture
def trainer(tiny_model_dir, tmp_path) -> Trainer:
    trainer = build_trainer(tiny_learner_config(tiny_model_dir, tmp_path / "out"))
    move(trainer.model)  # B starts at zero: moved, the adapter changes the model
    return trainer


def move(model, by: float = 0.01) -> None:
    """An optimizer step's worth of change to the active adapter's weights."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad:
                p.add_(by * (1 + (hash(name) % 7)))


def assert_same_files(folder: Path, reference: Path) -> None:
    """The weights and config of ``folder`` are those peft's save_pretrained wrote at ``reference``."""
    ours, peft = load_file(folder / WEIGHTS), load_file(reference / WEIGHTS)
    assert ours.keys() == peft.keys()
    for key in ours:
        assert torch.equal(ours[key], peft[key]), key
    config = lambda at: json.loads((at / "adapter_config.json").read_text())  # noqa: E731
    assert config(folder) == config(reference)


def test_the_saved_adapter_is_what_peft_saves_and_loads_back(trainer, tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    save_adapter(trainer.model, tmp_path / "ours")
    trainer.model.save_pretrained(tmp_path / "peft")
    assert_same_files(tmp_path / "ours", tmp_path / "peft")
    assert not (tmp_path / "ours" / "README.md").exists()  # peft's model card: no reader needs it

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)  # the learner's on a CPU
    loaded = PeftModel.from_pretrained(base, tmp_path / "ours")
    ids = torch.tensor([[1, 5, 9, 13, 2]])
    trainer.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, trainer.model(input_ids=ids).logits)


def test_a_named_adapter_is_saved_as_the_lone_learners(trainer, tiny_model_dir, tmp_path):
    config = tiny_learner_config(tiny_model_dir, tmp_path / "out")
    model = add_adapter(trainer.model, "p1", lora_config(config), seed=3)
    activate(model, "p1")
    move(model, 0.02)
    save_adapter(model, tmp_path / "ours")
    model.save_pretrained(tmp_path / "peft", selected_adapters=["p1"])
    assert_same_files(tmp_path / "ours", tmp_path / "peft" / "p1")


def test_the_saved_keys_are_pefts():
    from peft.tuners.tuners_utils import _remove_adapter_name_from_state_dict_key as peft_key

    for key, name in [
        ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight", "default"),
        ("base_model.model.model.layers.1.mlp.down_proj.lora_B.p1.weight", "p1"),
        ("base_model.model.model.embed_tokens.lora_embedding_A.p1", "p1"),  # a parameter named after it
        ("base_model.model.p1.q_proj.lora_A.p1.weight", "p1"),  # a module of the adapter's name stays
    ]:
        assert adapters._saved_key(key, name) == peft_key(key, name)


def test_a_publication_links_its_checkpoints_weights_and_writes_them_after_a_step(trainer, tmp_path):
    meta = {"run": "r", "group_ids": []}
    checkpoint = save_checkpoint(tmp_path / "ck", 1, 1, trainer.model, trainer.optimizer, trainer.scheduler, meta)
    ready = prepare(trainer.model, tmp_path / "adapters" / "policy-v1")

    linked = os.stat(ready.path / WEIGHTS)
    assert linked.st_ino == os.stat(checkpoint / "adapter" / WEIGHTS).st_ino  # written once
    save_adapter(trainer.model, tmp_path / "fresh")
    assert ready.digest == adapter_digest(tmp_path / "fresh")  # the bytes a fresh save writes
    assert ready.write_s > 0 and ready.digest_s > 0 and ready.probe_s > 0

    move(trainer.model)  # a step: the checkpoint no longer holds the adapter's weights
    moved = prepare(trainer.model, tmp_path / "adapters" / "policy-v2")
    assert os.stat(moved.path / WEIGHTS).st_ino != linked.st_ino and moved.digest != ready.digest
    save_adapter(trainer.model, tmp_path / "fresh2")
    assert moved.digest == adapter_digest(tmp_path / "fresh2")


def test_saving_again_where_a_linked_file_is_never_writes_through_the_link(trainer, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    save_adapter(trainer.model, first)
    adapters.remember_saved(trainer.model, first)
    save_adapter(trainer.model, second)  # the same weights: a link to the first's file
    assert os.stat(second / WEIGHTS).st_ino == os.stat(first / WEIGHTS).st_ino
    proven = adapter_digest(first)
    move(trainer.model)
    save_adapter(trainer.model, second)  # new weights where the link is
    assert adapter_digest(first) == proven and adapter_digest(second) != proven


def test_a_published_version_outlives_its_pruned_checkpoint(trainer, tmp_path):
    meta = {"run": "r", "group_ids": []}
    save_checkpoint(tmp_path / "ck", 1, 1, trainer.model, trainer.optimizer, trainer.scheduler, meta)
    ready = prepare(trainer.model, tmp_path / "adapters" / "policy-v1")
    move(trainer.model)
    save_checkpoint(tmp_path / "ck", 2, 1, trainer.model, trainer.optimizer, trainer.scheduler, meta)
    assert prune_checkpoints(tmp_path / "ck", 2, keep=1) == [tmp_path / "ck" / "step-00000001"]
    assert adapter_digest(ready.path) == ready.digest
    move(trainer.model, -0.01)  # no checkpoint holds these weights: they are written
    assert prepare(trainer.model, tmp_path / "adapters" / "policy-v3").digest != ready.digest


def test_a_resumed_version_links_the_checkpoint_it_was_loaded_from(trainer, tiny_model_dir, tmp_path):
    meta = {"run": "r", "group_ids": []}
    checkpoint = save_checkpoint(tmp_path / "ck", 3, 2, trainer.model, trainer.optimizer, trainer.scheduler, meta)
    resumed = build_trainer(tiny_learner_config(tiny_model_dir, tmp_path / "again"))
    state = load_checkpoint(checkpoint, resumed.model, resumed.optimizer, resumed.scheduler)

    assert (state.step, state.version) == (3, 2)
    ready = prepare(resumed.model, tmp_path / "adapters" / "policy-v2")
    assert os.stat(ready.path / WEIGHTS).st_ino == os.stat(checkpoint / "adapter" / WEIGHTS).st_ino


def test_across_file_systems_the_weights_are_copied(trainer, tmp_path, monkeypatch):
    save_adapter(trainer.model, tmp_path / "first")
    adapters.remember_saved(trainer.model, tmp_path / "first")

    def cross_device(source, dest):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(adapters.os, "link", cross_device)
    save_adapter(trainer.model, tmp_path / "second")
    assert os.stat(tmp_path / "second" / WEIGHTS).st_ino != os.stat(tmp_path / "first" / WEIGHTS).st_ino
    assert adapter_digest(tmp_path / "second") == adapter_digest(tmp_path / "first")


def test_a_remembered_file_that_differs_is_not_linked(trainer, tmp_path):
    save_adapter(trainer.model, tmp_path / "first")
    adapters.remember_saved(trainer.model, tmp_path / "first")
    weights = load_file(tmp_path / "first" / WEIGHTS)
    key = sorted(weights)[0]
    weights[key] = weights[key] + 1.0  # someone else's file at that path now
    from safetensors.torch import save_file

    save_file(weights, tmp_path / "first" / WEIGHTS, metadata={"format": "pt"})
    save_adapter(trainer.model, tmp_path / "second")
    trainer.model.save_pretrained(tmp_path / "peft")
    assert_same_files(tmp_path / "second", tmp_path / "peft")


def test_an_adapter_that_trains_more_than_lora_is_saved_by_peft(tiny_model_dir, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    lora = LoraConfig(r=4, target_modules=["q_proj"], modules_to_save=["lm_head"], task_type="CAUSAL_LM")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32), lora)
    save_adapter(model, tmp_path / "ours")
    model.save_pretrained(tmp_path / "peft")
    assert_same_files(tmp_path / "ours", tmp_path / "peft")
    assert any("lm_head" in key for key in load_file(tmp_path / "ours" / WEIGHTS))  # beyond the LoRA tensors


async def test_a_publication_reports_its_phases_and_sends_the_prepared_folder(trainer, tmp_path):
    bodies = []

    def gateway(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"version": 1, "name": "policy-v1", "load_s": 0.01, "proof": [{"passed": 1}]})

    meta = {"run": "r", "group_ids": []}
    checkpoint = save_checkpoint(tmp_path / "ck", 1, 1, trainer.model, trainer.optimizer, trainer.scheduler, meta)
    client = httpx.AsyncClient(transport=httpx.MockTransport(gateway))
    published = await Publisher("http://gw", "k", tmp_path / "adapters", client=client).publish(trainer.model, 1)

    (body,) = bodies
    assert body["path"] == published.path == str(tmp_path / "adapters" / "policy-v1")
    assert body["digest"] == published.digest == adapter_digest(checkpoint / "adapter")  # the same bytes
    assert published.proof == ({"passed": 1},) and published.engine_load_s == 0.01
    phases = published.metrics()
    assert set(phases) == set(PHASE_METRICS) and all(phases[key] > 0 for key in PHASE_METRICS)
    assert published.save_s == pytest.approx(published.write_s + published.digest_s + published.probe_s)


def test_a_publications_phases_become_step_metrics():
    published = Published(2, "policy-v2", "/a", 0.6, 2.5, 0.02, 1, "d", (), 0.05, 0.01, 0.54)
    assert published.metrics() == {
        "publish_write_s": 0.05,
        "publish_digest_s": 0.01,
        "publish_probe_s": 0.54,
        "publish_gateway_s": pytest.approx(1.9),
        "publish_engine_load_s": 0.02,
    }
    assert publication_metrics(published) == published.metrics()
    assert publication_metrics(None) == dict.fromkeys(PHASE_METRICS)  # a step that published nothing
