"""The SQL trajectory store: runs, tasks, groups, rollouts and recorded calls."""
