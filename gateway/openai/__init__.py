"""The OpenAI dialect: Chat Completions, Completions and Models."""
