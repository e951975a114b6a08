"""One GRPO step on a tiny random Qwen2 with LoRA (peft), on CPU."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM

from gateway.store.samples import Sample
from learner.loss import LossConfig, grpo_loss, token_logprobs
from learner.packing import pack_samples, pad_samples
from learner.step import StepConfig, accumulate_gradients, forward_row, row_loss, train_step

VOCAB = 64


def lora_model(seed=0):
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=128)
    base = Qwen2ForCausalLM(config)
    base.config._attn_implementation = "eager"
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    model = get_peft_model(base, lora)
    return model


def on_policy_samples(model, seed, n=5, low=6, high=14):
    """Samples whose old log-probs are the model's own, so every ratio starts at 1."""
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(n):
        length = int(rng.integers(low, high))
        ids = rng.integers(0, VOCAB, length)
        mask = np.zeros(length, np.int8)
        mask[int(rng.integers(1, length - 1)):] = 1
        with torch.no_grad():
            lp = token_logprobs(model(input_ids=torch.from_numpy(ids)[None]).logits, torch.from_numpy(ids)[None])[0]
        old = np.where(mask == 1, lp.numpy(), 0).astype(np.float32)
        samples.append(Sample((0,), ids.astype(np.int32), mask, old, np.where(mask == 1, 0, -1).astype(np.int32)))
    return samples


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}


def adapter(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def test_one_step_with_positive_advantages_lowers_the_loss_on_the_batch():
    model = lora_model()
    rows = pack_samples(on_policy_samples(model, 0), [1.0] * 5, token_budget=24).rows
    config = StepConfig()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    before = train_step(model, optimizer, rows, config)
    assert before["optimizer_stepped"] and before["ratio_min"] == pytest.approx(1.0, abs=1e-5)
    assert before["loss"] == pytest.approx(-1.0, abs=1e-5)  # -ratio * A with ratio 1, A 1
    after = accumulate_gradients(model, rows, config).metrics()
    model.zero_grad(set_to_none=True)
    assert after["loss"] < before["loss"] - 1e-3
    assert after["ratio_mean"] > 1.0
    for key in ("loss", "grad_norm", "entropy", "clip_frac_low", "clip_frac_high", "ratio_min", "ratio_mean",
                "ratio_max", "is_masked_fraction", "tokens", "tokens_trained"):
        assert before[key] is not None and math.isfinite(before[key])
    assert before["tokens"] == sum(r.num_tokens for r in rows) and before["rows"] == len(rows)


def test_untrained_tokens_send_no_gradient_to_the_logits():
    model = lora_model()
    [row, *_] = pack_samples(on_policy_samples(model, 1), [1.0, -0.5, 2.0, 0.3, -1.0], token_budget=40).rows
    logits = forward_row(model, row, StepConfig())
    logits.retain_grad()
    row_loss(logits, row, StepConfig(), normaliser=1.0).loss.backward()
    # logits at t-1 predict token t: their gradient is nonzero exactly where token t is trained
    predicts_trained = torch.zeros(row.num_tokens, dtype=torch.bool)
    predicts_trained[:-1] = row.loss_mask[1:]
    per_position = logits.grad[0].abs().sum(-1)
    assert (per_position[~predicts_trained] == 0).all()
    assert (per_position[predicts_trained] > 0).all()


def test_garbage_at_untrained_positions_leaves_the_gradients_unchanged():
    model = lora_model()
    rows = pack_samples(on_policy_samples(model, 2), [1.0, -1.0, 0.5, 2.0, -0.3], token_budget=40).rows
    accumulate_gradients(model, rows, StepConfig())
    clean = grads(model)
    model.zero_grad(set_to_none=True)
    dirty_rows = []
    for row in rows:
        old, adv = row.old_logprobs.clone(), row.advantages.clone()
        old[~row.loss_mask], adv[~row.loss_mask] = math.nan, math.nan
        dirty_rows.append(type(row)(**{**row.__dict__, "old_logprobs": old, "advantages": adv}))
    accumulate_gradients(model, dirty_rows, StepConfig())
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
    out = grpo_loss(token_logprobs(logits, batch.input_ids), batch.old_logprobs, batch.advantages, batch.loss_mask,
                    LossConfig(), normaliser=normaliser)
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
    stats = accumulate_gradients(model, rows, StepConfig())
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
    trained = sum(int(r.loss_mask.sum()) for r in rows)  # on policy: no token is masked by its ratio
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
    metrics = train_step(model, torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr), rows,
                         StepConfig(max_grad_norm=max_norm))
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
