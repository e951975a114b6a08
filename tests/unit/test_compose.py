"""docker/compose.yaml: a stack that runs on one host without a bridge network or a registry pull, whose
commands use flags the CLI has; `docker compose config` validates it (tests/setup_machine.sh installs compose)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import yaml
from typer.testing import CliRunner

from harnessrl.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
DEFAULT = re.compile(r"\$\{(\w+):-([^}]*)\}")


def services() -> dict[str, dict]:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def argv(service: dict) -> list[str]:
    command = service.get("command", [])
    text = command if isinstance(command, str) else shlex.join(command)
    return shlex.split(DEFAULT.sub(lambda m: m.group(2), text))


def test_the_stack_has_each_piece_on_the_hosts_network_and_loopback():
    found = services()
    assert {
        "postgres",
        "migrate",
        "engine-1",
        "engine-2",
        "gateway-1",
        "gateway-2",
        "worker-1",
        "worker-2",
        "learner",
    } <= set(found)
    for name, service in found.items():
        assert service["network_mode"] == "host", name  # no bridge network is ever created
        assert "ports" not in service and "networks" not in service, name
        for needed in service.get("depends_on", {}):
            assert needed in found, (name, needed)
        if "--host" in argv(service):
            assert argv(service)[argv(service).index("--host") + 1] == "127.0.0.1", name
    assert "networks" not in yaml.safe_load(COMPOSE.read_text())


def test_every_image_is_built_from_the_local_base_image():
    for name, service in services().items():
        build = service["build"]
        dockerfile = ROOT / "docker" / build["context"] / build["dockerfile"]
        assert dockerfile.exists(), name
        assert re.search(r"^FROM debian:bookworm-slim$", dockerfile.read_text(), re.M), name


def test_the_gateways_serve_every_engine_and_the_workers_share_one_run():
    found = services()
    engines = {
        f"http://127.0.0.1:{argv(found[e])[argv(found[e]).index('--port') + 1]}" for e in ("engine-1", "engine-2")
    }
    ports = set()
    for name in ("gateway-1", "gateway-2"):
        args = argv(found[name])
        assert {args[i + 1] for i, a in enumerate(args) if a == "--engine-url"} == engines, name
        ports.add(args[args.index("--port") + 1])
    runs = {argv(found[w])[argv(found[w]).index("--run") + 1] for w in ("worker-1", "worker-2")}
    gateways = {
        argv(found[w])[argv(found[w]).index("--gateway") + 1].rsplit(":", 1)[1] for w in ("worker-1", "worker-2")
    }
    assert len(runs) == 1 and argv(found["learner"])[argv(found["learner"]).index("--run") + 1] in runs
    assert gateways == ports  # one worker on each gateway


def test_the_commands_use_flags_the_cli_has():
    for name, service in services().items():
        args = argv(service)
        if not args or args[0] not in ("serve", "run", "train", "db"):
            continue
        command = args[:2] if args[0] == "db" else args[:1]
        help_text = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "300"}).output
        for flag in (a for a in args if a.startswith("--")):
            assert flag in help_text, (name, flag)


def compose_command() -> list[str] | None:
    """`docker compose` (v2), else `docker-compose` (v1, Debian's package), else None."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


def test_docker_compose_validates_the_file():
    compose = compose_command()
    assert compose is not None, "no docker compose here: run tests/setup_machine.sh as root (installs docker-compose)"
    done = subprocess.run(
        [*compose, "-f", str(COMPOSE), "config", "-q"],
        capture_output=True,
        text=True,
        env={**os.environ, "HARNESSRL_ADMIN_KEY": "k"},
    )
    assert done.returncode == 0, done.stderr
    unkeyed = subprocess.run(
        [*compose, "-f", str(COMPOSE), "config", "-q"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "HARNESSRL_ADMIN_KEY"},
    )
    assert unkeyed.returncode != 0 and "HARNESSRL_ADMIN_KEY" in unkeyed.stderr  # no stack without a key


def test_the_stack_image_installs_and_copies_every_package_the_project_ships():
    import tomllib

    shipped = {
        p.rstrip("*")
        for p in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"][
            "include"
        ]
    }
    dockerfile = (ROOT / "docker" / "Dockerfile.stack").read_text()
    stubbed = set(re.search(r"for package in ([\w ]+); do", dockerfile).group(1).split())
    copied = {
        name for name in re.findall(r"^COPY (\w+) \1$", dockerfile, re.M) if (ROOT / name / "__init__.py").exists()
    }
    assert stubbed == copied == shipped
