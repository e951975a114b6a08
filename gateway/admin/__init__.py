"""Admin endpoints: publishing adapters (policy versions; their wire is ``contracts.publication``)."""
