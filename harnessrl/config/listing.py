"""`harnessrl ls`'s config: what to list, the filters GET /api/rollouts and /api/groups take, and where to read
(the store, or a gateway's REST API). Each key is its option (``what`` its argument), declared here once."""

from __future__ import annotations

from pydantic import Field

from harnessrl.config.files import Section, cli
from harnessrl.config.sections import GatewayConfig, StoreConfig


class ReadGatewayConfig(GatewayConfig):
    url: str | None = Field(
        None,
        description="Read through this gateway's REST API instead of opening the store",
        json_schema_extra=cli("--gateway"),
    )


class ListConfig(Section):
    """Policies, runs, groups or rollouts, filtered (harnessrl/reports/views.py, remote_views.py)."""

    what: str = Field(description="policies | runs | groups | rollouts", json_schema_extra=cli(argument=True))
    run: str | None = Field(None, description="Only this run (runs: names containing it)")
    status: str | None = Field(None, description="groups: open|ready|consumed; rollouts: running|finished|failed")
    task: str | None = Field(None, description="Only this task (groups, rollouts)")
    harness: str | None = Field(None, description="Rollouts of this harness")
    policy_version: int | None = Field(None, description="Rollouts with a call of this version")
    reward_min: float | None = Field(None, description="Rollouts with reward >= this")
    reward_max: float | None = Field(None, description="Rollouts with reward <= this")
    limit: int = Field(50, description="At most this many rows")
    gateway: ReadGatewayConfig = ReadGatewayConfig()
    store: StoreConfig = StoreConfig()

    def where(self):
        """The filters as the store's listings take them (store.listings.RolloutFilter)."""
        from store.listings import RolloutFilter

        return RolloutFilter(
            run=self.run,
            task=self.task,
            status=self.status,
            harness=self.harness,
            policy_version=self.policy_version,
            reward_min=self.reward_min,
            reward_max=self.reward_max,
        )
