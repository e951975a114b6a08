"""The `harnessrl` app: the commands of harnessrl/cli/, one module per group, registered in --help order."""

from __future__ import annotations

import typer

from harnessrl.cli import keys, policies, rollouts, serve, store, training
from harnessrl.cli.assets import images_app, models_app, tasks_app

app = typer.Typer(
    help="Train LoRA harness adapters inside off-the-shelf coding agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
# In this order in --help: the commands, then the sub-apps.
app.command("serve")(serve.serve)
app.command("export")(store.export)
app.command("run")(rollouts.run_rollouts)
app.command("eval")(rollouts.eval_policies)
app.command("ls")(store.ls)
app.command("show")(store.show)
app.command("report")(store.report)
app.command("health")(store.health)
app.command("quickstart")(training.quickstart)
app.command("train")(training.train)
app.command("demo")(training.demo)
app.command("demo-policies")(policies.demo_policies)
app.command("sft")(training.sft)
app.command("feedback")(keys.feedback)
app.add_typer(store.db_app, name="db")
app.add_typer(models_app, name="models")
app.add_typer(images_app, name="images")
app.add_typer(tasks_app, name="tasks")
app.add_typer(keys.keys_app, name="keys")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
