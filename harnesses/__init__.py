"""Harnesses (one per agent: the builtin agent, the CLI agents in agents/, OpenEnv's tools in openenv/), their
images and task environments, the tasks and datasets they are given, and how a rollout is scored (grading/: the
verifier, reward functions, the LLM judge). The runner that plays them is `rollouts`."""
