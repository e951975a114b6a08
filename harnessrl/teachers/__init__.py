"""Teachers: what serves an agent instead of the policy, recorded in the policy's tokens for SFT. An external
model through litellm behind a gateway of its own (teacher), or a task's reference solution played as the
agent's own shell tool call (demonstrations)."""
