"""`harnessrl train`'s config: every key of the learner's settings (learner/config.py) and the job's own: what to
train (``runs``, ``policies``), a settings folder of jobs handing their runs over, and the store. ``policies`` is
a list of names, or a table of them, each holding learner keys over the shared ones (validated as a whole):

    runs = ["pi-run"]
    [optimizer]
    lr = 1e-4                  # every policy's
    [policies.alpha.optimizer]
    lr = 1e-5                  # alpha's runs train at 1e-5
    [policies.bob]             # bob's on the shared settings

On the command line a section's key is ``--<section>-<key>`` (``--lora-rank``, ``--optimizer-lr``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from harnessrl.config.files import LoosePath, cli, explained, first_error
from harnessrl.config.sections import StoreConfig, policy_name
from learner.config import ConfigError, LearnerConfig
from learner.settings import merged


class TrainConfig(LearnerConfig):
    """The async GRPO learner on runs' ready groups, one adapter per policy (learner.loop, learner.policies_loop)."""

    runs: list[str] = Field(
        [],
        description="A run whose ready groups to train on; repeat it to train several in one learner",
        json_schema_extra=cli("--run"),
    )
    policies: list[str] | dict[str, dict[str, Any]] = Field(
        [],
        description="Train the runs of this policy (repeatable), beside any --run, in one learner. In the file: a "
        "list of names, or a table of policies each with learner keys over the shared ones "
        "([policies.NAME.optimizer] lr = 1e-5)",
        json_schema_extra=cli("--policy"),
    )
    settings_dir: LoosePath | None = Field(
        None,
        description="Each --run's settings are SETTINGS_DIR/<run>.toml, trained once its job writes them "
        "(`quickstart --learner-folder`): one learner for every policy of a server, each on its own settings",
    )
    store: StoreConfig = StoreConfig()

    @field_validator("policies")
    @classmethod
    def _policy_names(cls, policies: list[str] | dict[str, dict[str, Any]]):
        for name in policies:
            policy_name(name)  # a bad one is refused as the key's value (InvalidPolicyName names the rule)
        return policies

    @model_validator(mode="after")
    def _policies_fit(self) -> TrainConfig:
        for name in self.policy_names():
            self.policy_settings(name)  # a key its table gets wrong is named here, before anything starts
        return self

    def policy_names(self) -> list[str]:
        return list(self.policies)

    def learner(self) -> LearnerConfig:
        """The shared settings, every policy's but for its table's keys."""
        return LearnerConfig.model_validate({name: getattr(self, name) for name in LearnerConfig.model_fields})

    def policy_settings(self, policy: str | None) -> LearnerConfig:
        """``policy``'s settings: the shared ones with its table over them (a policy without one: the shared)."""
        table = self.policies.get(policy) if isinstance(self.policies, dict) and policy else None
        if not table:
            return self.learner()
        try:
            return LearnerConfig.model_validate(merged(self.learner(), table))
        except ValidationError as exc:
            raise ConfigError(explained(first_error(exc), LearnerConfig, f"policies.{policy}.")) from None
