"""OpenEnv in harnessrl: environments as tasks (tasks, datasets), their tools relayed to agents (relay,
agent), their rubrics as rewards (rewards), and harnessrl served as an OpenEnv environment (serve)."""
