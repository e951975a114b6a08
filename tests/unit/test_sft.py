"""SFT warm start (learner.sft): the loss is the mean NLL of the sampled tokens only, equal to an
independent token-level computation, and it falls when a tiny model trains on a few trajectories."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learner.config import LearnerConfig
from learner.forward import ForwardConfig
from learner.packing import pack_samples
from learner.sft import SftConfig, sft_step, train_sft, trainable
from learner.trainer import build_trainer
from tests.learner_builders import lora_model, sample_of

CONFIG = SftConfig(
    epochs=1, samples_per_step=8, token_budget=256, forward=ForwardConfig(activation_checkpointing=False)
)


def trajectories(seed: int = 0, n: int = 4) -> list:
    """Prompt tokens (mask 0), an answer (mask 1: the same behaviour each time, to imitate), a tool
    output (mask 0), a last answer (mask 1)."""
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(n):
        parts = [
            (rng.integers(0, 64, 9), 0),
            (np.array([5, 6, 7, 8, 9]), 1),
            (rng.integers(0, 64, 4), 0),
            (np.array([10, 11, 12]), 1),
        ]
        ids = np.concatenate([p for p, _ in parts])
        mask = np.concatenate([np.full(len(p), m) for p, m in parts])
        samples.append(sample_of(ids, mask, np.zeros(len(ids), np.float32)))
    return samples


def reference_loss(model, samples) -> float:
    """Plain forward of each sample alone, full logits, log-softmax, the masked tokens' NLL averaged."""
    total, count = 0.0, 0
    with torch.no_grad():
        for s in samples:
            ids = torch.from_numpy(s.input_ids.astype(np.int64))[None]
            logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)
            for t in range(1, len(s.input_ids)):
                if s.loss_mask[t]:
                    total -= float(logp[t - 1, ids[0, t]])
                    count += 1
    return total / count


def test_the_loss_is_the_mean_nll_of_the_sampled_tokens_only():
    model, samples = lora_model(moved=True), trajectories()
    expected = reference_loss(model, samples)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    rows = pack_samples(samples, [0.0] * len(samples), 256).rows
    loss, tokens, _ = sft_step(model, optimizer, rows, CONFIG)
    assert tokens == sum(int(s.loss_mask[1:].sum()) for s in samples) == 4 * 8
    assert loss == pytest.approx(expected, rel=1e-5)


def test_training_lowers_the_loss_on_a_tiny_model():
    model, samples = lora_model(), trajectories()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    before = reference_loss(model, samples)
    result = train_sft(
        model, optimizer, samples, SftConfig(epochs=30, samples_per_step=4, token_budget=256, forward=CONFIG.forward)
    )
    after = reference_loss(model, samples)
    assert result.samples == 4 and result.refused == 0 and len(result.steps) == 30 * 1
    assert after < before * 0.8 and result.steps[-1].loss < result.steps[0].loss


def test_samples_with_nothing_sampled_are_left_out_and_none_at_all_is_an_error():
    [sample] = trajectories(n=1)
    prompt_only = sample_of(sample.input_ids, np.zeros(len(sample.input_ids)), np.zeros(len(sample.input_ids)))
    assert trainable([sample, prompt_only]) == [sample]
    optimizer = torch.optim.SGD(lora_model().parameters(), lr=0.0)
    with pytest.raises(ValueError, match="no sample to train on"):
        train_sft(lora_model(), optimizer, [prompt_only], CONFIG)


def saved_warm_start(config: LearnerConfig, folder):
    """A LoRA adapter that has learnt something (a fresh one's B is 0), saved to ``folder``; the model."""
    warm = build_trainer(config).model
    with torch.no_grad():
        for name, p in warm.named_parameters():
            if "lora_B" in name:
                p.fill_(0.01)
    warm.save_pretrained(folder)
    return warm


def test_the_learner_starts_from_a_warm_start_adapter_when_given(tiny_model_dir, tmp_path):
    config = LearnerConfig(model_dir=str(tiny_model_dir), device="cpu", lora={"rank": 4})
    warm = saved_warm_start(config, tmp_path / "adapter")
    started = build_trainer(config.updated(lora={"init_adapter": str(tmp_path / "adapter")})).model
    fresh = build_trainer(config).model
    trained = {n: p for n, p in started.named_parameters() if p.requires_grad}
    assert trained and all(n.count("lora_") for n in trained)
    assert all(torch.equal(p, dict(warm.named_parameters())[n]) for n, p in trained.items())
    assert not all(torch.equal(p, dict(fresh.named_parameters())[n]) for n, p in trained.items())


def test_a_warm_started_learner_with_a_kl_term_keeps_its_start_adapter_as_the_reference(tiny_model_dir, tmp_path):
    config = LearnerConfig(model_dir=str(tiny_model_dir), device="cpu", lora={"rank": 4})
    saved_warm_start(config, tmp_path / "adapter")
    started = config.updated(lora={"init_adapter": str(tmp_path / "adapter")})
    assert build_trainer(started).reference is None  # beta = 0: no KL term, nothing held
    assert build_trainer(config.updated(loss={"beta": 0.05})).reference is None  # fresh: the base model
    trainer = build_trainer(started.updated(loss={"beta": 0.05}))
    trained = [p for p in trainer.model.parameters() if p.requires_grad]
    assert len(trainer.reference.tensors) == len(trained)
    assert all(torch.equal(r, p) and r.data_ptr() != p.data_ptr() for r, p in zip(trainer.reference.tensors, trained))


def test_each_step_trains_on_samples_per_step_samples_however_few_rows_they_pack_into():
    model, samples = lora_model(), trajectories(n=10)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    config = SftConfig(epochs=2, samples_per_step=4, token_budget=256, forward=CONFIG.forward)
    assert len(pack_samples(samples, [0.0] * 10, 256).rows) == 1  # all ten fit one row: one step an epoch before
    result = train_sft(model, optimizer, samples, config)
    assert [s.epoch for s in result.steps] == [0, 0, 0, 1, 1, 1]  # 4 + 4 + 2 samples an epoch
    assert [s.tokens for s in result.steps] == [4 * 8, 4 * 8, 2 * 8] * 2
