"""The admin key: created once under $HARNESSRL_HOME (0600) by the gateway, found there by the CLI."""

from __future__ import annotations

import os
import stat
from concurrent.futures import ThreadPoolExecutor

import pytest
from typer.testing import CliRunner

from gateway.settings import GatewaySettings
from harnessrl.cli.app import app
from harnessrl.server import BackgroundGateway
from harnessrl.settings import ADMIN_KEY_ENV, AdminKeyError, admin_key, admin_key_path
from tests import http_calls as http


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(ADMIN_KEY_ENV, raising=False)
    return tmp_path / "home"


def test_the_gateway_creates_a_private_key_once_and_reuses_it(home):
    key = admin_key(create=True)
    path = admin_key_path()
    assert path == home / "admin.key" and path.read_text().strip() == key and len(key) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert admin_key(create=True) == key and admin_key() == key  # later starts and clients: the same key
    assert [p.name for p in home.iterdir()] == ["admin.key"]  # no staging file left behind


def test_gateways_starting_at_once_agree_on_one_key(home):
    with ThreadPoolExecutor(8) as pool:
        keys = set(pool.map(lambda _: admin_key(create=True), range(32)))
    assert keys == {admin_key_path().read_text().strip()}


def test_a_given_key_or_the_environment_comes_before_the_file(home, monkeypatch):
    admin_key(create=True)
    assert admin_key("given") == "given"
    monkeypatch.setenv(ADMIN_KEY_ENV, "from-env")
    assert admin_key() == "from-env" and admin_key("given") == "given"


def test_clients_never_create_a_key_and_say_where_they_looked(home):
    with pytest.raises(AdminKeyError, match="harnessrl serve") as error:
        admin_key()
    assert str(admin_key_path()) in str(error.value) and not admin_key_path().exists()


def test_a_key_file_readable_by_others_is_refused(home):
    admin_key(create=True)
    os.chmod(admin_key_path(), 0o644)
    with pytest.raises(AdminKeyError, match="chmod 600"):
        admin_key()


def test_ls_through_a_gateway_finds_the_key_under_harnessrl_home(home, sqlite_db, fake_engine, fake_engine_server):
    settings = GatewaySettings(
        database_url=sqlite_db, engine_url=fake_engine_server.url, admin_key=admin_key(create=True)
    )
    with BackgroundGateway(settings) as gateway:
        created = http.post(
            f"{gateway.url}/api/rollouts",
            json={"run": "keyed-run", "task": "t"},
            headers={"x-admin-key": settings.admin_key},
        )
        assert created.status_code == 201
        listed = CliRunner().invoke(app, ["ls", "runs", "--gateway", gateway.url], env={"COLUMNS": "200"})
        assert listed.exit_code == 0, listed.output
        assert "keyed-run" in listed.output
        refused = CliRunner().invoke(app, ["ls", "runs", "--gateway", gateway.url, "--admin-key", "wrong"])
        assert refused.exit_code == 1 and "refused the admin key" in refused.output


def test_ls_through_a_gateway_without_a_key_names_where_to_get_one(home):
    result = CliRunner().invoke(app, ["ls", "runs", "--gateway", "http://127.0.0.1:9"])
    assert result.exit_code == 1 and "admin.key" in result.output and "harnessrl serve" in result.output
