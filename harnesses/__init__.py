"""Harnesses (one per agent: the builtin agent, the CLI agents in agents/, OpenEnv's tools in openenv/), their
images and task environments, and what they are given and scored by: tasks and datasets, verification, rewards
and the LLM judge. The runner that plays them is `rollouts`."""
