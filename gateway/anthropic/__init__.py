"""The Anthropic dialect: Messages and count_tokens, served through the same session pipeline."""
