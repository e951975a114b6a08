"""Mapping the public model name to the current policy version."""

from gateway.policy.registry import PolicyRegistry
from store.policies import adapter_name


def test_public_name_maps_to_base_model_before_any_adapter():
    policy = PolicyRegistry("policy", "base")
    resolved = policy.resolve("policy")
    assert (resolved.engine_model, resolved.version, resolved.public_name) == ("base", 0, "policy")


def test_published_adapter_becomes_current_and_named_versions_stay_addressable():
    policy = PolicyRegistry("policy", "base")
    policy.publish(1, adapter_name("policy", 1))
    policy.publish(2, adapter_name("policy", 2))
    assert policy.resolve("policy").engine_model == "policy-v2"
    assert policy.resolve("anything-else").version == 2
    assert policy.resolve("policy-v1").version == 1
    policy.retire(1)
    assert policy.resolve("policy-v1").version == 2
    policy.retire(2)  # the current version is never retired
    assert policy.resolve("policy").version == 2
