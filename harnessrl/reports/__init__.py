"""What a store says, read out: the `ls`/`show`/`health` tables (from a store or over a gateway), the
training curves of `report`, `export` (JSONL, Parquet, OpenEnv) and the re-tokenization skew."""
