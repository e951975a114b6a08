"""The OpenAI Responses dialect (/v1/responses), served through the chat session pipeline."""
