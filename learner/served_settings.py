"""Settings a publishing learner takes from the gateway it publishes to, so the two never disagree:
the token budget (the engine's max model length, for ``token_budget = 0``) and ``max_staleness`` (the
versions the gateway keeps loaded). Offline, the config's own (a fallback budget when it says 0)."""

from __future__ import annotations

import logging

from learner.config import LearnerConfig
from learner.memory import memory_estimate
from learner.publish import GatewayUnreachable, Publisher
from learner.trainer import Trainer

logger = logging.getLogger("learner")

FALLBACK_TOKEN_BUDGET = 32768  # token_budget = 0 with no gateway to ask (publish = false)


async def resolve_token_budget(config: LearnerConfig, publisher: Publisher | None, trainer: Trainer) -> LearnerConfig:
    """token_budget = 0: the engine's max model length (the gateway reports it), else FALLBACK_TOKEN_BUDGET.
    Logs how long a sample fits in the memory the learner has (learner.memory)."""
    budget, source = config.batch.token_budget, "config"
    if budget == 0:
        try:
            served = await publisher.max_model_len() if publisher is not None else None
        except GatewayUnreachable as exc:  # training goes on without the gateway (publishing retries later)
            logger.warning("could not ask the gateway for the engine's max model length: %s", exc)
            served = None
        budget, source = (
            (served, "the engine's max model length")
            if served
            else (FALLBACK_TOKEN_BUDGET, "fallback: no gateway reported a max model length; set token_budget")
        )
    estimate = memory_estimate(trainer.model, config.forward.chunk_tokens, config.forward.activation_checkpointing)
    logger.info("token_budget = %d (%s); %s", budget, source, estimate.describe())
    if estimate.max_tokens and estimate.max_tokens < budget:
        logger.warning(
            "a sample of token_budget = %d tokens may not fit in memory (~%d do): lower token_budget, or free memory",
            budget,
            estimate.max_tokens,
        )
    return config.updated(batch={"token_budget": budget})


async def resolve_max_staleness(config: LearnerConfig, publisher: Publisher | None) -> LearnerConfig:
    """A publishing learner drops samples by the gateway's max_staleness (the versions it keeps loaded),
    so the two never disagree; offline (or a gateway that does not say), the config's batch.max_staleness."""
    try:
        served = await publisher.max_staleness() if publisher is not None else None
    except GatewayUnreachable as exc:
        logger.warning("could not ask the gateway for its max_staleness: %s", exc)
        served = None
    if served is None:
        return config
    if served != config.batch.max_staleness:
        logger.info("max_staleness = %d (the gateway's)", served)
    return config.updated(batch={"max_staleness": served})
