"""Statuses are StrEnums owned by the store's records; the DB and REST keep their strings."""

from __future__ import annotations

from typing import get_args

from gateway.api.protocol import EndRollout
from store.records import ENDED, CallTag, GroupStatus, RolloutStatus


def test_status_values_are_the_strings_the_database_and_rest_api_hold():
    assert [s.value for s in RolloutStatus] == ["running", "finished", "failed", "cancelled"]
    assert [s.value for s in GroupStatus] == ["open", "ready", "consumed", "quarantined"]
    assert [t.value for t in CallTag] == ["undelivered", "retried"]
    assert RolloutStatus.FINISHED == "finished" and f"{GroupStatus.READY}" == "ready"


def test_the_end_a_client_may_post_is_one_the_store_accepts():
    assert set(get_args(EndRollout.model_fields["status"].annotation)) == set(ENDED)
