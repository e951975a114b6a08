"""Admin endpoints: publishing adapters (policy versions)."""
