"""The KL term's reference: the base model from a fresh LoRA, the starting adapter after a warm start."""

from __future__ import annotations

import pytest
import torch

from learner.loss import LossConfig
from learner.packing import pack_samples
from learner.reference import reference_policy, snapshot
from learner.step import StepConfig, train_step
from tests.learner_builders import adapter, lora_model, on_policy_samples


def _optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)


def test_kl_after_a_warm_start_is_measured_against_the_starting_adapter():
    model = lora_model(moved=True)  # a warm start: the adapter already moved the policy off the base
    rows = pack_samples(on_policy_samples(model, 6), [1.0, -1.0, 0.5, -0.5, 1.0], token_budget=40).rows
    config = StepConfig(loss=LossConfig(beta=0.1))
    warm = snapshot(model)
    first = train_step(model, _optimizer(model), rows, config, reference=warm)
    assert first["kl"] == pytest.approx(0.0, abs=1e-9)  # the policy is its reference
    cold = lora_model(moved=True)
    to_base = train_step(cold, _optimizer(cold), rows, config)
    assert to_base["kl"] > 1e-3  # the base model is far from the warm start


def test_the_trained_weights_are_back_after_the_reference_forward_even_on_error():
    model = lora_model(moved=True)
    frozen = snapshot(model)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(1.0)
    trained = {k: v.clone() for k, v in adapter(model).items()}
    with pytest.raises(RuntimeError), reference_policy(model, frozen):
        torch.testing.assert_close(adapter(model), {k: v - 1.0 for k, v in trained.items()})
        raise RuntimeError("forward failed")
    torch.testing.assert_close(adapter(model), trained)


def test_a_reference_of_another_shape_is_refused():
    frozen = snapshot(lora_model(targets=("q_proj",)))
    with pytest.raises(ValueError, match="the reference holds"), reference_policy(lora_model(), frozen):
        pass
