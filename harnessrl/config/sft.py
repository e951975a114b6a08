"""`harnessrl sft`'s config: which run's successes to imitate, the SFT passes over them, the learner's settings
it trains with (a `harnessrl train` TOML, model and learning rate over it), where the adapter goes and the
gateway it is published to. Each key is its option, declared here once."""

from __future__ import annotations

from pydantic import Field

from harnessrl.config.files import LoosePath, Section, cli
from harnessrl.config.sections import GatewayConfig, StoreConfig


class SftPassesConfig(Section):
    """The passes over the trajectories (learner.sft.SftConfig)."""

    epochs: int = Field(2, ge=1, description="Passes over the trajectories")
    samples_per_step: int = Field(
        8, ge=1, description="Trajectories per optimizer step (packed into rows of --token-budget)"
    )
    token_budget: int = Field(4096, ge=16, description="Tokens per packed row (longer samples left out)")


class SftLearnerConfig(Section):
    """The learner's settings SFT trains with: a `harnessrl train` TOML, with the model and learning rate over it."""

    file: LoosePath | None = Field(
        None,
        description="Learner TOML (model_dir, dtype, device, lora.rank, optimizer.lr; see `harnessrl train "
        "--show-config`)",
        json_schema_extra=cli("--learner-config"),
    )
    model: LoosePath | None = Field(None, description="Model folder [default: the learner TOML's model_dir]")
    lr: float | None = Field(None, description="AdamW learning rate [default: the learner TOML's]")


class SftPublishConfig(GatewayConfig):
    url: str | None = Field(
        None,
        description="A gateway URL: publish the adapter there as the next policy version",
        json_schema_extra=cli("--publish"),
    )


class SftJobConfig(Section):
    """A LoRA adapter trained on the sampled tokens of a run's successful trajectories (harnessrl/training/sft.py)."""

    run: str = Field(description="The run whose successful trajectories to imitate")
    min_reward: float = Field(1.0, description="Rollouts with at least this reward count as successes")
    best_of_group: bool = Field(
        False, description="Only the best rollout of each group (rejection sampling over a policy run)"
    )
    out: LoosePath | None = Field(None, description="Output folder [default: $HARNESSRL_HOME/sft/RUN]")
    passes: SftPassesConfig = SftPassesConfig()
    learner: SftLearnerConfig = SftLearnerConfig()
    gateway: SftPublishConfig = SftPublishConfig()
    store: StoreConfig = StoreConfig()
