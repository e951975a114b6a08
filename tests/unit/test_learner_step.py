"""One GRPO step on a tiny random Qwen2 with LoRA (peft), on CPU."""

from __future__ import annotations

import math

import pytest
import torch

from learner.forward import causal_lm, chunked_token_logprobs, output_head
from learner.loss import LossConfig, grpo_loss, token_logprobs
from learner.packing import pack_samples, pad_samples
from learner.step import StepConfig, accumulate_gradients, train_step
from tests.learner_builders import adapter, grads, lora_model, on_policy_samples


def test_one_step_with_positive_advantages_lowers_the_loss_on_the_batch():
    model = lora_model()
    rows = pack_samples(on_policy_samples(model, 0), [1.0] * 5, token_budget=24).rows
    config = StepConfig()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    before = train_step(model, optimizer, rows, config)
    assert before["optimizer_stepped"] and before["ratio_min"] == pytest.approx(1.0, abs=1e-5)
    assert before["loss"] == pytest.approx(-1.0, abs=1e-5)  # -ratio * A with ratio 1, A 1
    after = accumulate_gradients(model, rows, config)[0].metrics()
    model.zero_grad(set_to_none=True)
    assert after["loss"] < before["loss"] - 1e-3
    assert after["ratio_mean"] > 1.0
    for key in (
        "loss",
        "grad_norm",
        "entropy",
        "clip_frac_low",
        "clip_frac_high",
        "ratio_min",
        "ratio_mean",
        "ratio_max",
        "is_masked_fraction",
        "tokens",
        "tokens_trained",
    ):
        assert before[key] is not None and math.isfinite(before[key])
    assert before["tokens"] == sum(r.num_tokens for r in rows) and before["rows"] == len(rows)


def test_untrained_tokens_send_no_gradient_to_the_hidden_states():
    model = lora_model()
    [row, *_] = pack_samples(on_policy_samples(model, 1), [1.0, -0.5, 2.0, 0.3, -1.0], token_budget=40).rows
    with torch.no_grad():
        hidden = causal_lm(model)(input_ids=row.input_ids[None], output_hidden_states=True).hidden_states[-1][0]
    hidden = hidden.clone().requires_grad_()
    new, _ = chunked_token_logprobs(hidden[row.predictors], output_head(causal_lm(model)), row.targets, chunk_tokens=4)
    every = torch.ones(1, row.num_targets, dtype=torch.bool)
    grpo_loss(new[None], row.old_logprobs[None], row.advantages[None], every, LossConfig(), 1.0).loss.backward()
    # the hidden state at t-1 predicts token t: its gradient is nonzero exactly where token t is trained
    predicts_trained = torch.zeros(row.num_tokens, dtype=torch.bool)
    predicts_trained[row.predictors] = True
    per_position = hidden.grad.abs().sum(-1)
    assert (per_position[~predicts_trained] == 0).all()
    assert (per_position[predicts_trained] > 0).all()


def test_garbage_at_untrained_positions_leaves_the_gradients_unchanged():
    model = lora_model()
    samples = on_policy_samples(model, 2)
    advantages = [1.0, -1.0, 0.5, 2.0, -0.3]
    accumulate_gradients(model, list(pack_samples(samples, advantages, token_budget=40).rows), StepConfig())
    clean = grads(model)
    model.zero_grad(set_to_none=True)
    for s in samples:
        s.old_logprobs[s.loss_mask == 0] = math.nan
    accumulate_gradients(model, list(pack_samples(samples, advantages, token_budget=40).rows), StepConfig())
    dirty = grads(model)
    assert clean.keys() == dirty.keys() and all(torch.equal(clean[k], dirty[k]) for k in clean)


def test_a_batch_with_no_trained_token_takes_no_step():
    model = lora_model()
    samples = on_policy_samples(model, 3)
    for s in samples:
        s.loss_mask[:] = 0
    rows = pack_samples(samples, [1.0] * 5, token_budget=40).rows
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    before = adapter(model)
    metrics = train_step(model, optimizer, rows, StepConfig())
    assert not metrics["optimizer_stepped"] and metrics["grad_norm"] == 0.0 and metrics["loss"] is None
    assert all(torch.equal(before[k], v) for k, v in adapter(model).items())
    assert train_step(model, optimizer, [], StepConfig())["tokens"] == 0


def padded_reference_grads(model, samples, advantages, normaliser):
    """One padded batch, one loss with the given normaliser: no packing, no accumulation."""
    model.zero_grad(set_to_none=True)
    batch = pad_samples(samples, advantages)
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    out = grpo_loss(
        token_logprobs(logits, batch.input_ids),
        batch.old_logprobs,
        batch.advantages,
        batch.loss_mask,
        LossConfig(),
        normaliser=normaliser,
    )
    out.loss.backward()
    reference = grads(model)
    model.zero_grad(set_to_none=True)
    return reference, out.stats.tokens_trained


def test_packed_accumulated_gradient_equals_the_padded_batch_gradient():
    model = lora_model()
    samples = on_policy_samples(model, 4, n=6)
    advantages = [1.0, -1.0, 0.5, -0.5, 2.0, -2.0]
    rows = pack_samples(samples, advantages, token_budget=30).rows
    assert len(rows) > 1  # several micro-batches
    # learner.step: per-row sums, divided by the trained-token count afterwards
    stats, _ = accumulate_gradients(model, rows, StepConfig())
    packed = {k: g / stats.tokens_trained for k, g in grads(model).items()}
    reference, trained = padded_reference_grads(model, samples, advantages, float(stats.tokens_trained))
    assert trained == stats.tokens_trained
    for k, g in reference.items():
        torch.testing.assert_close(packed[k], g, atol=1e-6, rtol=1e-4)


def test_the_step_gradient_is_the_per_trained_token_mean():
    model = lora_model()
    samples = on_policy_samples(model, 7, n=6)
    advantages = [1.0, -1.0, 0.5, -0.5, 2.0, -2.0]
    rows = pack_samples(samples, advantages, token_budget=30).rows
    trained = sum(r.num_targets for r in rows)  # on policy: no token is masked by its ratio
    reference, _ = padded_reference_grads(model, samples, advantages, float(trained))
    want_norm = torch.sqrt(sum((g.double() ** 2).sum() for g in reference.values())).item()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    metrics = train_step(model, optimizer, rows, StepConfig(max_grad_norm=0.0))
    assert metrics["tokens_trained"] == trained
    assert metrics["grad_norm"] == pytest.approx(want_norm, rel=1e-4)


def test_gradient_norm_is_clipped_to_max_grad_norm():
    model = lora_model()
    rows = pack_samples(on_policy_samples(model, 5), [3.0] * 5, token_budget=40).rows
    before = adapter(model)
    lr, max_norm = 0.1, 1e-3
    metrics = train_step(
        model,
        torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr),
        rows,
        StepConfig(max_grad_norm=max_norm),
    )
    assert metrics["grad_norm"] > max_norm  # reported before clipping
    moved = torch.sqrt(sum(((v - before[k]) ** 2).sum() for k, v in adapter(model).items()))
    assert moved.item() / lr == pytest.approx(max_norm, rel=1e-3)


def test_kl_is_measured_against_the_base_model_with_the_adapter_disabled():
    model = lora_model()
    rows = pack_samples(on_policy_samples(model, 6), [1.0] * 5, token_budget=40).rows
    config = StepConfig(loss=LossConfig(beta=0.1))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    first = train_step(model, optimizer, rows, config)
    assert first["kl"] == pytest.approx(0.0, abs=1e-9)  # LoRA starts at zero: policy == base
    second = train_step(model, optimizer, rows, config)
    assert second["kl"] > 1e-6
