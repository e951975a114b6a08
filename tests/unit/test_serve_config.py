"""`harnessrl serve` is a config like `run`'s: every option a key of ``ServeConfig`` ([gateway], [engine], [store],
[policies], [limits]), --show-config prints them all (the admin key never), the printed file starts the same
gateway as the command line it replaces, and the gateway's settings are built in one place from it."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import harnessrl.engine.watchdog as engine_watchdog
import harnessrl.server as server
from harnessrl.cli.app import app
from harnessrl.config.files import load_config
from harnessrl.config.serve import ServeConfig
from harnessrl.server import free_port
from tests.unit.test_house_rules import ROOT, product_files
from tests.unit.test_run_config import leaves, named_keys

MANAGED_URLS = ["http://127.0.0.1:9101", "http://127.0.0.1:9102"]


def invoke(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300", **(env or {})})


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))
    monkeypatch.delenv("HARNESSRL_ADMIN_KEY", raising=False)
    monkeypatch.delenv("HARNESSRL_DATABASE_URL", raising=False)


def served(monkeypatch, *args: str):
    """`harnessrl serve ARGS` up to the point it would serve: the gateway's settings and the managed engines'
    launch (vLLM and uvicorn left out)."""
    seen = {}
    monkeypatch.setattr(server, "uvicorn_server", lambda settings, *a, **kw: seen.setdefault("settings", settings))

    def serve_until_stopped(server, engine, console, sockets):
        for listener in sockets:
            listener.close()
        return 0

    monkeypatch.setattr(engine_watchdog, "serve_until_stopped", serve_until_stopped)

    def start_engines(launch, count, logs, timeout_s, console):
        seen["engines"] = (launch, count, timeout_s)
        return SimpleNamespace(urls=MANAGED_URLS[:count])

    monkeypatch.setattr(engine_watchdog, "start_engines", start_engines)
    result = invoke("serve", *args)
    assert result.exit_code == 0, result.output
    return seen


def every_option(tmp_path) -> list[str]:
    """A command line giving each of serve's keys but the engines' (given by the cases)."""
    database = f"sqlite+aiosqlite:///{tmp_path}/db.sqlite"
    return [
        *("--host", "127.0.0.1", "--port", str(free_port()), "--public-url", "https://gw.example.org:8443/h"),
        *("--allowed-host", "a.example", "--allowed-host", "b.example", "--public-model", "m", "--require-token"),
        *("--otlp-endpoint", "http://127.0.0.1:6006/v1/traces", "--database-url", database, "--policies", "3"),
        *("--max-staleness", "1", "--adapter-probe-tolerance", "0.25", "--live-sessions-per-minute", "5"),
        *("--rollout-max-stored-mib", "7", "--token-max-in-flight", "3", "--token-max-connections", "4"),
        *("--max-head-kib", "9", "--max-body-mib", "5", "--engine-timeout", "12", "--engine-max-in-flight", "6"),
    ]


def engine_options(tmp_path, managed: bool) -> list[str]:
    (tmp_path / "model").mkdir(exist_ok=True)
    if not managed:
        return ["--engine-url", "http://127.0.0.1:9", "--engine-url", "http://127.0.0.1:10", "--tokenizer", "model"]
    return [
        *("--model", str(tmp_path / "model"), "--engines", "2", "--engine-port", "9100", "--max-model-len", "512"),
        *("--max-lora-rank", "8", "--dtype", "float32", "--engine-start-timeout", "30"),
    ]


def test_show_config_prints_every_key_and_reading_it_back_gives_the_same_config(tmp_path):
    command = ["serve", *engine_options(tmp_path, managed=True), *every_option(tmp_path), "--admin-key", "s3cret"]
    shown = invoke(*command, "--show-config")
    assert shown.exit_code == 0, shown.output
    assert "s3cret" not in shown.stdout and "admin_key" not in shown.stdout  # a secret: never printed
    assert set(named_keys(shown.stdout)) >= leaves(ServeConfig) - {"gateway.admin_key"}
    assert [line for line in shown.stdout.splitlines() if line.startswith("[")] == [
        "[gateway]",
        "[engine]",
        "[store]",
        "[policies]",
        "[limits]",
    ]
    (tmp_path / "shown.toml").write_text(shown.stdout)
    config = load_config(ServeConfig, tmp_path / "shown.toml", {})
    assert config.gateway.admin_key is None  # given again (its option, its variable, the key file) when served
    assert (config.engine.count, config.engine.port, config.engine.dtype, config.policies.count) == (
        2,
        9100,
        "float32",
        3,
    )
    assert (config.gateway.allowed_hosts, config.limits.max_head_kib) == (["a.example", "b.example"], 9)
    again = invoke("serve", "--config", str(tmp_path / "shown.toml"), "--show-config")
    assert again.stdout == shown.stdout


def test_the_defaults_show_too_and_an_unset_key_is_a_comment():
    shown = invoke("serve", "--show-config")
    assert shown.exit_code == 0, shown.output
    assert 'host = "127.0.0.1"' in shown.stdout and "max_head_kib = 64" in shown.stdout
    assert "# model: not set (its default applies)" in shown.stdout


@pytest.mark.parametrize("managed", [False, True], ids=["attached", "managed"])
def test_serve_config_starts_the_same_gateway_as_the_command_line_it_replaces(tmp_path, monkeypatch, managed):
    monkeypatch.chdir(tmp_path)  # --tokenizer model: a relative folder, resolved the same either way
    command = [*engine_options(tmp_path, managed), *every_option(tmp_path)]
    from_the_command_line = served(monkeypatch, *command)
    (tmp_path / "serve.toml").write_text(invoke("serve", *command, "--show-config").stdout)
    from_the_file = served(monkeypatch, "--config", str(tmp_path / "serve.toml"))
    assert from_the_file == from_the_command_line
    settings = from_the_file["settings"]
    assert (settings.max_head_bytes, settings.max_body_bytes, settings.rollout_max_stored_bytes) == (
        9 * 1024,
        5 * 2**20,
        7 * 2**20,
    )
    assert settings.allowed_hosts == ("127.0.0.1", "a.example", "b.example") and settings.require_token
    assert settings.model_dir == str((tmp_path / "model").resolve())
    if managed:
        launch, count, timeout_s = from_the_file["engines"]
        assert (launch.port, launch.max_model_len, launch.max_lora_rank, count, timeout_s) == (9100, 512, 8, 2, 30.0)
        assert settings.engines() == tuple(MANAGED_URLS) and settings.engine_dtype == "float32"
    else:
        assert settings.engines() == ("http://127.0.0.1:9", "http://127.0.0.1:10") and settings.max_adapters > 0


def test_an_option_wins_over_the_file_and_a_bad_key_is_named(tmp_path, monkeypatch):
    path = tmp_path / "serve.toml"
    path.write_text('[engine]\nurls = ["http://127.0.0.1:9"]\n[limits]\nmax_head_kib = 8\n')
    settings = served(monkeypatch, "--config", str(path), "--max-head-kib", "16", "--port", str(free_port()))
    assert settings["settings"].max_head_bytes == 16 * 1024 and settings["settings"].engines() == (
        "http://127.0.0.1:9",
    )
    path.write_text("[limits]\nmax_head_kb = 8\n")
    result = invoke("serve", "--config", str(path))
    assert result.exit_code == 1 and "unknown key limits.max_head_kb: [limits] takes" in " ".join(result.output.split())


def test_the_gateways_settings_are_made_in_one_place():
    """quickstart's own gateway, `demo` and a teacher's gateway take serve's config (its defaults, a section
    set), and ``harnessrl.config.serve.gateway_settings`` makes their settings from it, as it does serve's."""
    made = {
        str(p.relative_to(ROOT)): n
        for p in product_files()
        if (n := len(re.findall(r"\bGatewaySettings\(", p.read_text())))
    }
    assert made == {"harnessrl/config/serve.py": 1}


def test_the_example_loads():
    config = load_config(ServeConfig, ROOT / "examples/serve.toml", {})
    assert (config.gateway.host, config.gateway.require_token, len(config.engine.urls)) == ("0.0.0.0", True, 2)
