"""Harnesses (one per agent), task loading, verification and the rollout runner."""
