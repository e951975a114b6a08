"""GRPO loss pieces against per-token reference loops in float64 numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from learner.loss import (
    KL_LOG_RATIO_LIMIT,
    LossConfig,
    LossStats,
    grpo_loss,
    importance_ratio,
    kl_k3,
    token_entropy,
    token_logprobs,
)

# --- reference computations: one token at a time, float64 ---------------------------------------


def ref_logprobs_entropy(logits, ids, temperature=1.0):
    logits = np.asarray(logits, np.float64) / temperature
    batch, length, _ = logits.shape
    logprobs, entropy = np.zeros((batch, length)), np.zeros((batch, length))
    for b in range(batch):
        for t in range(1, length):
            z = logits[b, t - 1]  # the logits at t-1 predict token t
            lse = z.max() + math.log(np.exp(z - z.max()).sum())
            logp = z - lse
            logprobs[b, t] = logp[ids[b, t]]
            entropy[b, t] = -sum(math.exp(v) * v for v in logp)
    return logprobs, entropy


def ref_loss(new, old, adv, mask, cfg, normaliser, ref=None):
    """Returns (loss, d loss / d new [B, T], stats dict), token by token."""
    new, old = np.asarray(new, np.float64), np.asarray(old, np.float64)
    adv = np.asarray(adv, np.float64)
    grad = np.zeros_like(new)
    total, kl_total = 0.0, 0.0
    sampled = trained = low = high = 0
    ratios = []
    for b in range(new.shape[0]):
        for t in range(new.shape[1]):
            if not mask[b, t]:
                continue
            sampled += 1
            r = math.exp(new[b, t] - old[b, t])
            if (cfg.is_min is not None and r < cfg.is_min) or (cfg.is_max is not None and r > cfg.is_max):
                continue
            trained += 1
            ratios.append(r)
            a = adv[b] if adv.ndim == 1 else adv[b, t]
            clipped_r = min(max(r, 1 - cfg.epsilon), 1 + cfg.epsilon_high)
            if r * a <= clipped_r * a:  # the unclipped term is the min: it carries the gradient
                total -= r * a
                grad[b, t] -= r * a
            else:
                total -= clipped_r * a
            low += r < 1 - cfg.epsilon and a < 0
            high += r > 1 + cfg.epsilon_high and a > 0
            if cfg.beta > 0:
                d = min(max(ref[b, t] - new[b, t], -KL_LOG_RATIO_LIMIT), KL_LOG_RATIO_LIMIT)
                kl = math.exp(d) - d - 1
                kl_total += kl
                total += cfg.beta * kl
                if abs(ref[b, t] - new[b, t]) < KL_LOG_RATIO_LIMIT:
                    grad[b, t] += cfg.beta * (1 - math.exp(d))
    scale = 1 / normaliser if normaliser > 0 else 0.0
    stats = dict(
        sampled=sampled,
        trained=trained,
        low=low,
        high=high,
        kl=kl_total,
        ratio_min=min(ratios, default=None),
        ratio_max=max(ratios, default=None),
        ratio_mean=float(np.mean(ratios)) if ratios else None,
    )
    return total * scale, grad * scale, stats


# --- helpers --------------------------------------------------------------------------------------


def random_batch(seed, batch=4, length=24, spread=1.2):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(batch, length, generator=g, dtype=torch.float64) * 4
    new = old + torch.randn(batch, length, generator=g, dtype=torch.float64) * spread
    ref = old + torch.randn(batch, length, generator=g, dtype=torch.float64) * spread
    adv = torch.randn(batch, generator=g, dtype=torch.float64)
    mask = torch.rand(batch, length, generator=g) < 0.7
    mask[1] = False  # a fully masked row
    return new, old, ref, adv, mask


def run_loss(new, old, adv, mask, cfg, normaliser, ref=None):
    new = new.clone().requires_grad_(True)
    out = grpo_loss(new, old, adv, mask, cfg, normaliser, ref_logprobs=ref)
    out.loss.backward()
    return out, new.grad


# --- log-probs and entropy ------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_logprobs_and_entropy_match_the_shifted_reference(temperature):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 9, 11, generator=g) * 3
    ids = torch.randint(0, 11, (3, 9), generator=g)
    want_lp, want_h = ref_logprobs_entropy(logits.numpy(), ids.numpy(), temperature)
    got_lp = token_logprobs(logits, ids, temperature)
    got_h = token_entropy(logits, temperature)
    assert got_lp.shape == got_h.shape == (3, 9)
    np.testing.assert_allclose(got_lp.numpy(), want_lp, atol=1e-5)
    np.testing.assert_allclose(got_h.numpy(), want_h, atol=1e-5)
    assert (got_lp[:, 0] == 0).all() and (got_h[:, 0] == 0).all()  # nothing predicts token 0


def test_logprobs_and_entropy_of_empty_and_one_token_rows():
    for length in (0, 1):
        logits, ids = torch.randn(2, length, 5), torch.zeros(2, length, dtype=torch.long)
        assert token_logprobs(logits, ids).shape == (2, length) and token_entropy(logits).shape == (2, length)
        assert (token_logprobs(logits, ids) == 0).all()


def test_entropy_stays_finite_with_banned_tokens():
    logits = torch.tensor([[[0.0, 0.0, -math.inf, -math.inf]] * 2])
    assert token_entropy(logits)[0, 1].item() == pytest.approx(math.log(2))


def test_logprobs_accept_bf16_logits_and_return_float32():
    logits = torch.randn(1, 4, 7).bfloat16()
    assert token_logprobs(logits, torch.zeros(1, 4, dtype=torch.long)).dtype == torch.float32


# --- the loss against the reference ---------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    "cfg",
    [
        LossConfig(),
        LossConfig(epsilon=0.1, epsilon_high=0.5, is_min=0.5, is_max=2.0),
        LossConfig(beta=0.05),
        LossConfig(is_min=None, is_max=None, beta=0.3),
    ],
)
def test_loss_gradient_and_stats_match_the_token_loop(seed, cfg):
    new, old, ref, adv, mask = random_batch(seed)
    normaliser = 37.0
    out, grad = run_loss(new, old, adv, mask, cfg, normaliser, ref=ref)
    want, want_grad, want_stats = ref_loss(
        new.numpy(), old.numpy(), adv.numpy(), mask.numpy(), cfg, normaliser, ref.numpy()
    )
    assert out.loss.item() == pytest.approx(want, rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(grad.numpy(), want_grad, rtol=1e-9, atol=1e-12)
    s = out.stats
    assert (s.tokens_sampled, s.tokens_trained) == (want_stats["sampled"], want_stats["trained"])
    assert (s.tokens_clipped_low, s.tokens_clipped_high) == (want_stats["low"], want_stats["high"])
    assert s.kl_sum == pytest.approx(want_stats["kl"])
    m = s.metrics()
    assert m["ratio_min"] == pytest.approx(want_stats["ratio_min"])
    assert m["ratio_max"] == pytest.approx(want_stats["ratio_max"])
    assert m["ratio_mean"] == pytest.approx(want_stats["ratio_mean"])
    assert m["loss"] == pytest.approx(want * normaliser / s.tokens_trained)
    assert int(out.mask.sum()) == s.tokens_trained


def test_the_batch_exercises_masking_and_both_clips():
    new, old, ref, adv, mask = random_batch(0)
    _, _, stats = ref_loss(new.numpy(), old.numpy(), adv.numpy(), mask.numpy(), LossConfig(), 1.0, ref.numpy())
    assert stats["trained"] < stats["sampled"] and stats["low"] > 0 and stats["high"] > 0


def test_per_token_advantages_equal_broadcast_per_sample_ones():
    new, old, _, adv, mask = random_batch(3)
    per_sample, _ = run_loss(new, old, adv, mask, LossConfig(), 10.0)
    per_token, _ = run_loss(new, old, adv[:, None].expand_as(new).clone(), mask, LossConfig(), 10.0)
    assert per_sample.loss.item() == pytest.approx(per_token.loss.item())


def test_importance_ratio_masks_out_of_range_tokens():
    old = torch.zeros(1, 5)
    new = torch.log(torch.tensor([[1.0, 1e6, 1e-6, 2.0, 0.3]]))
    loss_mask = torch.tensor([[0, 1, 1, 1, 1]])
    ir = importance_ratio(new, old, loss_mask, 0.125, 8.0)
    assert ir.mask.tolist() == [[False, False, False, True, True]]
    assert ir.masked.tolist() == [[False, True, True, False, False]]
    assert ir.ratio[0, 3:].tolist() == pytest.approx([2.0, 0.3])
    assert ir.ratio[0, :3].tolist() == [1.0, 1.0, 1.0]  # untrained tokens hold 1


@pytest.mark.parametrize("log_ratio", [math.log(1e6), math.log(1e-6), 200.0, -200.0])
def test_extreme_ratios_give_finite_loss_and_gradient(log_ratio):
    old = torch.full((2, 4), -1.0)
    new = old.clone()
    new[:, 2] += log_ratio  # exp(200) overflows float32: must not leak inf or NaN
    adv = torch.tensor([1.0, -1.0])
    mask = torch.ones(2, 4, dtype=torch.bool)
    out, grad = run_loss(new, old, adv, mask, LossConfig(beta=0.1), 6.0, ref=old)
    assert math.isfinite(out.loss.item()) and torch.isfinite(grad).all()
    assert out.stats.tokens_trained == 6 and (grad[:, 2] == 0).all()
    assert out.stats.masked_fraction == pytest.approx(2 / 8)


def test_unbounded_ratio_of_1e6_is_clipped_for_positive_advantages_only():
    old, new = torch.zeros(2, 2), torch.tensor([[0.0, math.log(1e6)]] * 2)
    cfg = LossConfig(is_min=None, is_max=None)
    out, grad = run_loss(new, old, torch.tensor([1.0, -1.0]), torch.tensor([[0, 1], [0, 1]]), cfg, 1.0)
    assert grad[0, 1] == 0 and grad[1, 1] == pytest.approx(1e6)  # -r*A with A=-1: unclipped
    assert out.loss.item() == pytest.approx(-1.28 + 1e6)
    assert out.stats.tokens_clipped_high == 1 and out.stats.tokens_clipped_low == 0


def test_fully_masked_batch_gives_zero_loss_zero_gradient_and_empty_stats():
    new, old, ref, adv, _ = random_batch(4)
    mask = torch.zeros_like(new, dtype=torch.bool)
    for normaliser in (0.0, 5.0):
        out, grad = run_loss(new, old, adv, mask, LossConfig(beta=0.1), normaliser, ref=ref)
        assert out.loss.item() == 0.0 and (grad == 0).all()
    m = out.stats.metrics()
    assert m["tokens_trained"] == 0 and m["is_masked_fraction"] == 0.0
    assert m["ratio_min"] is None and m["ratio_max"] is None and m["loss"] is None and m["clip_frac_low"] is None


def test_empty_batch_gives_zero_loss():
    empty = torch.zeros(0, 0)
    out, grad = run_loss(empty, empty, torch.zeros(0), empty.bool(), LossConfig(beta=0.1), 0.0, ref=empty)
    assert out.loss.item() == 0.0 and grad.shape == (0, 0) and out.stats == LossStats.empty()


def test_garbage_at_untrained_positions_changes_nothing():
    new, old, ref, adv, mask = random_batch(5)
    per_token_adv = adv[:, None].expand_as(new).clone()
    cfg = LossConfig(beta=0.2)
    clean, clean_grad = run_loss(new, old, per_token_adv, mask, cfg, 20.0, ref=ref)
    dirty_old, dirty_ref, dirty_adv = old.clone(), ref.clone(), per_token_adv.clone()
    for t in (dirty_old, dirty_ref, dirty_adv):
        t[~mask] = math.nan
    dirty, dirty_grad = run_loss(new, dirty_old, dirty_adv, mask, cfg, 20.0, ref=dirty_ref)
    assert dirty.loss.item() == clean.loss.item()
    assert torch.equal(dirty_grad, clean_grad)


def test_micro_batches_with_a_global_normaliser_add_up_to_the_whole_batch():
    new, old, ref, adv, mask = random_batch(6)
    cfg = LossConfig(beta=0.05)
    whole, whole_grad = run_loss(new, old, adv, mask, cfg, 1.0, ref=ref)
    normaliser = float(whole.stats.tokens_trained)
    whole_mean = whole.loss.item() / normaliser
    parts = [run_loss(new[s], old[s], adv[s], mask[s], cfg, normaliser, ref=ref[s]) for s in (slice(0, 2), slice(2, 4))]
    assert sum(p[0].loss.item() for p in parts) == pytest.approx(whole_mean)
    np.testing.assert_allclose(torch.cat([p[1] for p in parts]).numpy(), whole_grad.numpy() / normaliser)
    merged = parts[0][0].stats.merge(parts[1][0].stats)
    for key, value in whole.stats.metrics().items():
        assert merged.metrics()[key] == pytest.approx(value)


def test_kl_k3_matches_the_formula_and_is_non_negative():
    g = torch.Generator().manual_seed(7)
    new, ref = -torch.rand(3, 6, generator=g) * 5, -torch.rand(3, 6, generator=g) * 5
    mask = torch.rand(3, 6, generator=g) < 0.5
    got = kl_k3(new, ref, mask)
    for b in range(3):
        for t in range(6):
            d = float(ref[b, t] - new[b, t])
            assert got[b, t].item() == pytest.approx(math.exp(d) - d - 1 if mask[b, t] else 0.0, rel=1e-5, abs=1e-6)
    assert (got >= 0).all()


def test_beta_without_reference_logprobs_is_an_error():
    new, old, _, adv, mask = random_batch(0)
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo_loss(new, old, adv, mask, LossConfig(beta=0.1), 1.0)


def test_empty_stats_have_no_ratio_range_and_count_nothing():
    empty = LossStats.empty()
    assert (empty.ratio_min, empty.ratio_max) == (math.inf, -math.inf)
    assert empty.tokens_trained == 0


# --- truncated importance sampling ---------------------------------------------------------------


def one_token_loss(log_ratio: float, advantage: float, config: LossConfig) -> tuple[float, float, int]:
    """(loss, d loss / d new log-prob, tokens trained) of one sampled token with that log-ratio."""
    new = torch.tensor([[0.0, log_ratio]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(1, 2, dtype=torch.float64)
    mask = torch.tensor([[False, True]])
    out = grpo_loss(new, old, torch.tensor([advantage], dtype=torch.float64), mask, config, normaliser=1.0)
    out.loss.backward()
    return out.loss.item(), new.grad[0, 1].item(), out.stats.tokens_trained


@pytest.mark.parametrize("ratio", [20.0, 1000.0])
def test_truncated_is_trains_a_token_far_above_the_cap_with_the_caps_weight(ratio):
    truncate = LossConfig(is_max=8.0, is_correction="truncate")
    loss, grad, trained = one_token_loss(math.log(ratio), -1.0, truncate)
    # -min(r A, clip(r) A) with r counted as 8 and A = -1: the unclipped 8 |A|, gradient 8 |A| d log pi
    assert trained == 1 and loss == pytest.approx(8.0) and grad == pytest.approx(8.0)
    assert one_token_loss(math.log(ratio), -1.0, LossConfig(is_max=8.0))[1:] == (0.0, 0)  # masked IS drops it


def test_truncated_is_keeps_tokens_below_is_min_and_leaves_ratios_under_the_cap_alone():
    truncate = LossConfig(is_min=0.5, is_max=8.0, is_correction="truncate")
    for ratio in (0.01, 0.9, 3.0):
        loss, grad, trained = one_token_loss(math.log(ratio), -1.0, truncate)
        masked = one_token_loss(math.log(ratio), -1.0, LossConfig(is_min=0.5, is_max=8.0))
        assert trained == 1
        if ratio >= 0.5:  # in range: both corrections are the same loss
            assert (loss, grad) == pytest.approx(masked[:2])
    assert one_token_loss(math.log(0.01), -1.0, LossConfig(is_min=0.5))[2] == 0  # masked IS drops it


def test_truncated_is_masks_only_tokens_whose_log_probs_are_nan():
    new = torch.tensor([[0.0, float("nan"), 0.5]], requires_grad=True)
    out = grpo_loss(
        new, torch.zeros(1, 3), torch.tensor([1.0]), torch.tensor([[False, True, True]]),
        LossConfig(is_correction="truncate"), normaliser=1.0,
    )  # fmt: skip
    out.loss.backward()
    assert out.mask.tolist() == [[False, False, True]] and torch.isfinite(new.grad).all()
