"""`harnessrl serve`: vLLM engines (started or attached) and the recording gateway in front of them.

The command is its config and one call: every key of ``ServeConfig`` (harnessrl/config/serve.py) is an option
(``harnessrl.cli.job_config.config_command``), over its --config file, and harnessrl/cli/serving.py does what
they ask."""

from __future__ import annotations

from harnessrl.cli.job_config import config_command
from harnessrl.config.serve import ServeConfig


@config_command(ServeConfig)
def serve(config: ServeConfig) -> None:
    """Start vLLM (or attach to one) and the recording gateway in front of it."""
    from harnessrl.cli.serving import start_gateway

    start_gateway(config)
