"""The learner recomputes log-probs at the temperature the run sampled at (the batch carries it), checked
against a float64 reference of log softmax(logits / T) on a tiny random model, on CPU."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from learner.config import LearnerConfig
from learner.groups import ReadyGroup, RolloutData, build_batch
from learner.tiny_model import VOCAB, tiny_base, tiny_lora
from learner.trainer import Trainer, train_batch
from store.samples import Sample

RUN_TEMPERATURE = 0.5


def tiny_lora_model() -> torch.nn.Module:
    return tiny_lora(tiny_base(), rank=4, targets=("q_proj", "v_proj"))


def reference_logprobs(model: torch.nn.Module, ids: np.ndarray, temperature: float) -> np.ndarray:
    """float64 log softmax(logits[t - 1] / T)[ids[t]] for t >= 1, 0 at t = 0: the sampler's processed logprobs."""
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ids.astype(np.int64))[None]).logits[0].double().numpy()
    scaled = logits[:-1] / temperature
    top = scaled.max(-1, keepdims=True)
    log_z = (top + np.log(np.exp(scaled - top).sum(-1, keepdims=True)))[:, 0]
    return np.concatenate([[0.0], scaled[np.arange(len(ids) - 1), ids[1:]] - log_z])


def sampled_at(model: torch.nn.Module, seed: int, temperature: float) -> Sample:
    """A sample whose last 6 tokens carry the log-probs a sampler at ``temperature`` reported."""
    ids = np.random.default_rng(seed).integers(0, VOCAB, 14).astype(np.int32)
    mask = np.zeros(14, np.int8)
    mask[8:] = 1
    old = np.where(mask == 1, reference_logprobs(model, ids, temperature), 0.0).astype(np.float32)
    return Sample((seed,), ids, mask, old, np.where(mask == 1, 0, -1).astype(np.int32))


def one_step(model, batch) -> dict:
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    trainer = Trainer(model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1.0))
    # The config's temperature is not the run's: the batch's must win.
    result, refused = train_batch(
        trainer, batch, LearnerConfig(model_dir="-", temperature=1.0, batch={"token_budget": 64})
    )
    assert refused == 0
    return result


def test_the_step_takes_log_probs_at_the_runs_temperature_not_the_configs():
    model = tiny_lora_model()
    group = ReadyGroup(
        1,
        None,
        (
            RolloutData(1, 0.0, (sampled_at(model, 1, RUN_TEMPERATURE),)),
            RolloutData(2, 1.0, (sampled_at(model, 2, RUN_TEMPERATURE),)),
        ),
    )
    batch = build_batch([group], learner_version=0, max_staleness=1, temperature=RUN_TEMPERATURE)

    at_run = one_step(model, batch)
    # The learner's log-probs equal the float64 reference at T: every importance ratio is 1.
    assert at_run["ratio_min"] == pytest.approx(1.0, abs=1e-4) and at_run["ratio_max"] == pytest.approx(1.0, abs=1e-4)
    assert at_run["tokens_trained"] == 12 and at_run["is_masked_fraction"] == 0.0

    at_one = one_step(model, replace(batch, temperature=1.0))  # what a learner ignoring the run's T computes
    assert at_one["ratio_max"] - at_one["ratio_min"] > 0.05
