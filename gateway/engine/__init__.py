"""Engine clients: how the gateway talks to vLLM (or a fake that speaks the same HTTP)."""
