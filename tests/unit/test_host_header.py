"""Only the Host names a gateway was configured for are served (DNS rebinding from a browser page)."""

from __future__ import annotations

import pytest

from gateway.settings import GatewaySettings
from tests.builders import chat_body, messages_body

EVIL = {"host": "evil.example"}


@pytest.mark.parametrize("path", ["/api/runs", "/admin/policy", "/ui/", "/health", "/v1/models"])
async def test_a_foreign_host_is_refused_everywhere_even_with_the_key(gateway, path):
    response = await gateway.http.get(path, headers=EVIL)
    assert response.status_code == 421, response.text
    error = response.json()["error"]
    assert error["code"] == "host_not_allowed" and "--allowed-host" in error["message"]


async def test_a_foreign_host_gets_the_error_in_the_dialect_of_the_endpoint(gateway):
    rollout = await gateway.new_rollout()
    chat = await gateway.agent.post(f"/r/{rollout['token']}/v1/chat/completions", json=chat_body(), headers=EVIL)
    assert chat.status_code == 421 and chat.json()["error"]["type"] == "invalid_request_error"
    messages = await gateway.agent.post(f"/r/{rollout['token']}/v1/messages", json=messages_body(), headers=EVIL)
    assert messages.status_code == 421 and messages.json()["type"] == "error"
    assert (await gateway.http.get("/api/calls")).json()["data"] == []


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost", "LOCALHOST:1", "[::1]:8000", "gateway", "gateway."])
async def test_loopback_names_and_configured_names_are_served(gateway, host):
    assert (await gateway.http.get("/api/runs", headers={"host": host})).status_code == 200


def test_served_names_are_loopback_the_public_url_and_the_allowed_hosts():
    settings = GatewaySettings(
        database_url="sqlite://", admin_key="k", public_url="https://GW.example.org:8443/x", allowed_hosts=("Box.lan",)
    )
    assert settings.served_hosts() == {"127.0.0.1", "localhost", "::1", "gw.example.org", "box.lan"}
    assert "gateway" not in GatewaySettings(database_url="sqlite://", admin_key="k").served_hosts()


def test_the_gateway_cannot_be_configured_without_an_admin_key():
    for key in ("", "  "):
        with pytest.raises(ValueError, match="admin key"):
            GatewaySettings(database_url="sqlite://", admin_key=key)
    with pytest.raises(TypeError):
        GatewaySettings(database_url="sqlite://")  # no default that leaves the control plane open


@pytest.mark.parametrize(
    "host",
    ["[::1]evil.example", "[::1]evil.example:8000", "[::1]:8000evil", "localhost:80:80", "::1", "[::1", "gateway:x"],
)
async def test_a_host_that_only_begins_with_a_served_name_is_refused(gateway, host):
    response = await gateway.http.get("/api/runs", headers={"host": host})
    assert response.status_code == 421, response.text
    assert response.json()["error"]["code"] == "host_not_allowed"
