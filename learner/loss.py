"""The GRPO loss on token-aligned tensors: log-probs, importance ratio (masked, or truncated: TIS),
clipped surrogate, KL.

Alignment: every [B, T] tensor here is aligned with ``input_ids``, as in
``store.samples.Sample``: position t holds a quantity *about token t* (its mask, the sampler's
log-prob of it, the policy's log-prob of it). The model's logits at position t predict token t + 1, so
``token_logprobs`` shifts by one and position 0, which nothing predicts, holds 0 and must be masked
(packing masks the first token of every sample; it is a prompt token anyway).

Masked positions may hold anything (zeros, garbage, NaN): every function selects with ``torch.where``
before arithmetic, so neither the loss nor its gradient can pick up a NaN from a token that is not
trained. A fully masked row or batch gives a finite zero loss whose gradient is zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from learner.step_settings import LossConfig

# exp(20) ~ 4.9e8: the k3 estimator's log-ratio is clamped here so one diverged token cannot make the
# loss infinite; past the clamp that token's KL gradient is zero, like a clipped ratio's.
KL_LOG_RATIO_LIMIT = 20.0


def token_logprobs(logits: Tensor, input_ids: Tensor, temperature: float = 1.0) -> Tensor:
    """Log-probability of each input token under the logits that predict it.

    logits: float [B, T, V]; logits[b, t] predict token t + 1.
    input_ids: long [B, T].
    temperature: logits are divided by it first, to match a sampler that reports the log-probs of its
        temperature-scaled distribution (vLLM's processed logprobs).
    Returns float32 [B, T]: out[b, t] = log softmax(logits[b, t - 1] / temperature)[input_ids[b, t]]
    for t >= 1, and out[b, 0] = 0.
    """
    if input_ids.shape[1] == 0:
        return logits.new_zeros(input_ids.shape, dtype=torch.float32)
    scaled = logits[:, :-1].float() / temperature  # [B, T-1, V], predicts tokens 1..T-1
    targets = input_ids[:, 1:].long().unsqueeze(-1)  # [B, T-1, 1]
    picked = scaled.gather(-1, targets).squeeze(-1) - torch.logsumexp(scaled, dim=-1)
    return F.pad(picked, (1, 0))


def token_entropy(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Entropy (nats) of the distribution that predicted each token, aligned like token_logprobs.

    logits: float [B, T, V]. Returns float32 [B, T]; out[b, 0] = 0. Call under no_grad for metrics.
    """
    if logits.shape[1] == 0:
        return logits.new_zeros(logits.shape[:2], dtype=torch.float32)
    probs = F.softmax(logits[:, :-1].float() / temperature, dim=-1)  # [B, T-1, V]
    # xlogy: 0 * log 0 = 0, so logits of -inf (a banned token) do not turn the entropy into NaN
    return F.pad(-torch.special.xlogy(probs, probs).sum(-1), (1, 0))


@dataclass(frozen=True)
class ImportanceRatio:
    ratio: Tensor  # float [B, T]: exp(new - old) on kept tokens, 1 elsewhere; differentiable in new
    mask: Tensor  # bool [B, T]: loss_mask and ratio within [is_min, is_max]: the tokens trained on
    masked: Tensor  # bool [B, T]: loss_mask tokens dropped because their ratio is out of range


def importance_ratio(
    new_logprobs: Tensor, old_logprobs: Tensor, loss_mask: Tensor, is_min: float | None, is_max: float | None
) -> ImportanceRatio:
    """Per-token ratio pi_new / pi_sampler, with out-of-range tokens masked out rather than clipped.

    new_logprobs: float [B, T], the learner's log-probs (carries the gradient).
    old_logprobs: float [B, T], the sampler's log-probs; only read where loss_mask is set.
    loss_mask: bool or 0/1 [B, T], tokens sampled by the policy.
    A token whose log-probs are NaN compares false against the bounds and is masked out too.
    """
    sampled = loss_mask.bool()
    log_ratio = torch.where(sampled, new_logprobs - old_logprobs, 0.0)
    observed = log_ratio.detach().exp()  # 0 or inf for extreme tokens: fine for comparisons
    in_range = ~torch.isnan(observed)
    if is_min is not None:
        in_range &= observed >= is_min
    if is_max is not None:
        in_range &= observed <= is_max
    keep = sampled & in_range
    # exp only of kept tokens' log-ratios: an inf in an unused branch would turn its zero gradient into NaN.
    ratio = torch.where(keep, log_ratio, 0.0).exp()
    # No counts here: they would sync the device per micro-batch; the loss's stats count once (_stats).
    return ImportanceRatio(ratio, keep, sampled & ~keep)


def truncated_ratio(
    new_logprobs: Tensor, old_logprobs: Tensor, loss_mask: Tensor, cap: float | None
) -> ImportanceRatio:
    """Truncated importance sampling: the ratio pi_new / pi_sampler of every sampled token, capped.

    new_logprobs, old_logprobs, loss_mask: [B, T] as in importance_ratio. Above ``cap`` the ratio is
    r * sg(cap / r): its value is ``cap`` and its gradient cap * grad log pi_new, a bounded weight
    (None: no cap). Tokens with NaN log-probs are masked out (they carry no usable weight).
    Returns an ImportanceRatio whose mask is every finite sampled token.
    """
    sampled = loss_mask.bool()
    log_ratio = torch.where(sampled, new_logprobs - old_logprobs, 0.0)
    keep = sampled & ~torch.isnan(log_ratio.detach())
    log_ratio = torch.where(keep, log_ratio, 0.0)
    if cap is not None:
        # log r - sg(max(0, log r - log cap)): capped value, gradient of log r scaled by the cap below
        excess = (log_ratio.detach() - math.log(cap)).clamp(min=0.0)
        log_ratio = log_ratio - excess
    return ImportanceRatio(log_ratio.exp(), keep, sampled & ~keep)


def per_token_advantages(advantages: Tensor, like: Tensor) -> Tensor:
    """advantages: float [B] (one per sample, broadcast over its tokens) or [B, T] (already per token,
    as in packed rows). Returns [B, T] in the dtype of ``like`` (the ratio)."""
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    return advantages.to(like.dtype).expand(like.shape)


def clipped_surrogate(ratio: Tensor, advantages: Tensor, mask: Tensor, epsilon: float, epsilon_high: float) -> Tensor:
    """Per-token PPO/DAPO loss: -min(r * A, clip(r, 1 - epsilon, 1 + epsilon_high) * A).

    ratio: float [B, T]; advantages: float [B] or [B, T]; mask: bool [B, T], tokens trained on.
    Returns float [B, T], 0 where mask is False.
    """
    adv = torch.where(mask, per_token_advantages(advantages, ratio), 0.0)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - epsilon, 1.0 + epsilon_high) * adv
    return torch.where(mask, -torch.minimum(unclipped, clipped), 0.0)


def clip_masks(
    ratio: Tensor, advantages: Tensor, mask: Tensor, epsilon: float, epsilon_high: float
) -> tuple[Tensor, Tensor]:
    """Tokens whose gradient the clip removed: bool [B, T] each.

    low: ratio < 1 - epsilon with a negative advantage; high: ratio > 1 + epsilon_high with a positive one.
    """
    adv = per_token_advantages(advantages, ratio)
    low = mask & (ratio < 1.0 - epsilon) & (adv < 0)
    high = mask & (ratio > 1.0 + epsilon_high) & (adv > 0)
    return low, high


def kl_k3(new_logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(pi_new || pi_ref): exp(ref - new) - (ref - new) - 1 (>= 0).

    new_logprobs: float [B, T], differentiable; ref_logprobs: float [B, T], the reference policy's log-probs
    of the same tokens, computed by the caller under no_grad with the LoRA adapter disabled (the base
    model) or the warm start's adapter swapped in (learner.reference), so no second model is loaded.
    mask: bool [B, T].
    Returns float [B, T], 0 where mask is False; the log-ratio is clamped to +-KL_LOG_RATIO_LIMIT.
    """
    diff = torch.where(mask, ref_logprobs - new_logprobs, 0.0).clamp(-KL_LOG_RATIO_LIMIT, KL_LOG_RATIO_LIMIT)
    return torch.where(mask, diff.exp() - diff - 1.0, 0.0)


@dataclass(frozen=True)
class LossStats:
    """Sums over tokens, so micro-batches merge exactly; the properties turn them into metrics."""

    tokens_sampled: int  # tokens with loss_mask set
    tokens_trained: int  # of those, kept by the importance-ratio mask
    tokens_clipped_low: int  # trained tokens whose gradient the lower clip removed
    tokens_clipped_high: int  # trained tokens whose gradient the upper clip removed
    loss_sum: float  # sum of the per-token loss (surrogate + beta * KL) over trained tokens
    kl_sum: float  # sum of k3 over trained tokens (0 when beta = 0)
    entropy_sum: float  # sum of entropy (nats) over trained tokens (0 when not given)
    ratio_sum: float  # sum of the ratio over trained tokens
    ratio_min: float  # min ratio over trained tokens; +inf when none
    ratio_max: float  # max ratio over trained tokens; -inf when none
    echo_tokens: int = 0  # ECHO's targets (tool-result tokens) the step trained on
    echo_nll_sum: float = 0.0  # sum of their NLL (nats, temperature 1), unweighted

    @staticmethod
    def empty() -> LossStats:
        return LossStats(0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, math.inf, -math.inf)

    def merge(self, other: LossStats) -> LossStats:
        return LossStats(
            self.tokens_sampled + other.tokens_sampled,
            self.tokens_trained + other.tokens_trained,
            self.tokens_clipped_low + other.tokens_clipped_low,
            self.tokens_clipped_high + other.tokens_clipped_high,
            self.loss_sum + other.loss_sum,
            self.kl_sum + other.kl_sum,
            self.entropy_sum + other.entropy_sum,
            self.ratio_sum + other.ratio_sum,
            min(self.ratio_min, other.ratio_min),
            max(self.ratio_max, other.ratio_max),
            self.echo_tokens + other.echo_tokens,
            self.echo_nll_sum + other.echo_nll_sum,
        )

    def _per_trained(self, total: float) -> float | None:
        return total / self.tokens_trained if self.tokens_trained else None

    @property
    def masked_fraction(self) -> float:
        """Share of sampled tokens dropped by the importance-ratio mask."""
        return 1.0 - self.tokens_trained / self.tokens_sampled if self.tokens_sampled else 0.0

    def metrics(self) -> dict[str, float | int | None]:
        """Per-token means over trained tokens; None where no token was trained."""
        trained = self.tokens_trained > 0
        return {
            "tokens_sampled": self.tokens_sampled,
            "tokens_trained": self.tokens_trained,
            "is_masked_fraction": self.masked_fraction,
            "clip_frac_low": self._per_trained(self.tokens_clipped_low),
            "clip_frac_high": self._per_trained(self.tokens_clipped_high),
            "loss": self._per_trained(self.loss_sum),
            "kl": self._per_trained(self.kl_sum),
            "entropy": self._per_trained(self.entropy_sum),
            "ratio_mean": self._per_trained(self.ratio_sum),
            "ratio_min": self.ratio_min if trained else None,
            "ratio_max": self.ratio_max if trained else None,
            "echo_tokens": self.echo_tokens,
            # mean NLL per tool-result token, not multiplied by echo_weight; None where the step had none
            "echo_loss": self.echo_nll_sum / self.echo_tokens if self.echo_tokens else None,
        }


def echo_loss(logprobs: Tensor, weight: float, normaliser: float | None = None) -> tuple[Tensor, float]:
    """ECHO's term: ``weight`` x the NLL of the tool-result tokens, per token.

    logprobs: float [E], the policy's log-probs of the echo targets at temperature 1 (carries the gradient;
        learner.step takes them from the same forward as GRPO's, the output layer applied at their predictors).
    weight: ``[loss] echo_weight`` (>= 0).
    normaliser: the tokens the mean is over; None: these E (the plain mean). learner.step passes the step's
        scale so that, once it divides the summed gradients by its count, the term is weight x the mean NLL
        over *all* the step's echo targets (every row, every rank): per token over the batch, like GRPO's.
        normaliser <= 0 or E = 0 gives a zero term.
    Returns (the term, a scalar to add to the loss; the summed NLL of the E targets, detached, for metrics).
    """
    total = -logprobs.sum()
    count = logprobs.shape[0] if normaliser is None else normaliser
    term = total * (weight / count) if count > 0 else total * 0.0
    return term, float(total.detach())


@dataclass(frozen=True)
class LossOutput:
    loss: Tensor  # scalar: sum of per-token loss over trained tokens / normaliser; backward() on it
    mask: Tensor  # bool [B, T]: the tokens trained on
    stats: LossStats


def grpo_loss(
    new_logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    config: LossConfig,
    normaliser: float,
    ref_logprobs: Tensor | None = None,
    entropy: Tensor | None = None,
) -> LossOutput:
    """The whole loss for one micro-batch: masked ratio, clipped surrogate, optional KL, normalised.

    new_logprobs, old_logprobs, loss_mask: [B, T] (see importance_ratio); advantages: [B] or [B, T].
    normaliser: number of trained tokens over the *whole* optimizer step (all micro-batches, all
        ranks), so that micro-batches add up to a per-token mean; pass 1.0 to get the plain sum and
        rescale gradients afterwards (learner.step does, since the count is known only at the end).
        normaliser <= 0 gives a zero loss.
    ref_logprobs: [B, T], required when config.beta > 0 (see kl_k3). entropy: [B, T], metrics only.
    """
    if config.is_correction == "truncate":
        ir = truncated_ratio(new_logprobs, old_logprobs, loss_mask, config.is_max)
    else:
        ir = importance_ratio(new_logprobs, old_logprobs, loss_mask, config.is_min, config.is_max)
    per_token = clipped_surrogate(ir.ratio, advantages, ir.mask, config.epsilon, config.epsilon_high)
    kl = torch.zeros_like(per_token)
    if config.beta > 0:
        if ref_logprobs is None:
            raise ValueError("beta > 0 needs ref_logprobs (the base model's log-probs, adapter disabled)")
        kl = kl_k3(new_logprobs, ref_logprobs, ir.mask)
        per_token = per_token + config.beta * kl
    total = per_token.sum()
    loss = total / normaliser if normaliser > 0 else total * 0.0
    stats = _stats(ir, per_token, kl, advantages, entropy, config)
    return LossOutput(loss, ir.mask, stats)


def _stats(
    ir: ImportanceRatio,
    per_token: Tensor,
    kl: Tensor,
    advantages: Tensor,
    entropy: Tensor | None,
    config: LossConfig,
) -> LossStats:
    """Reduce to Python numbers with one device sync."""
    mask = ir.mask
    ratio = ir.ratio.detach()
    low, high = clip_masks(ratio, advantages, mask, config.epsilon, config.epsilon_high)
    ent = torch.zeros_like(ratio) if entropy is None else torch.where(mask, entropy.detach().float(), 0.0)
    big = torch.finfo(ratio.dtype).max
    values = torch.stack(
        [
            v.double()
            for v in (  # float64: token counts stay exact past 2**24
                (mask | ir.masked).sum(),
                mask.sum(),
                low.sum(),
                high.sum(),
                per_token.detach().sum(),
                kl.detach().sum(),
                ent.sum(),
                torch.where(mask, ratio, 0.0).sum(),
                torch.where(mask, ratio, big).min() if mask.numel() else ratio.new_tensor(big),
                torch.where(mask, ratio, -big).max() if mask.numel() else ratio.new_tensor(-big),
            )
        ]
    ).tolist()
    trained = int(values[1])
    return LossStats(
        int(values[0]),
        trained,
        int(values[2]),
        int(values[3]),
        values[4],
        values[5],
        values[6],
        values[7],
        values[8] if trained else math.inf,
        values[9] if trained else -math.inf,
    )
