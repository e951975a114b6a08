"""Policy versions: which adapter serves which version (registry), publishing and retiring them on the
engines (adapters), proving an engine applies one (proof), following another gateway's publications
(follower) and pinning rollouts to a version (pins)."""
