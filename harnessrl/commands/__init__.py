"""The `harnessrl` commands, one module per group; harnessrl/cli.py registers them on the app."""
