"""Engine clients: how the gateway talks to vLLM (or a fake that speaks the same HTTP), and asks an engine
to prove it applies an adapter (proof)."""
