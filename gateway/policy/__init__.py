"""Policy versions: which adapter serves which version (registry), publishing and retiring them on the
engines (adapters, which prove each engine applies one through ``gateway.engine.proof``), following
another gateway's publications (follower) and pinning rollouts to a version (pins)."""
