"""The request stage of the call path: the body parsed and bounded, validated once per rollout, the
caller identified, side calls tagged, resends and retries recognized, refusals noted."""
