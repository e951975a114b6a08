"""The sandbox kinds `--sandbox` accepts, `--sandbox-option` pairs, and the gateway URL a bridgeless sandbox gets."""

from __future__ import annotations

import re

import pytest

from sandboxes import SandboxError
from sandboxes.kinds import Kind, backend_options, kind_names, option_pairs, sandbox_kind
from sandboxes.urls import public_url


def test_local_docker_and_harbor_kinds_parse_with_what_they_imply():
    local, docker = sandbox_kind("local"), sandbox_kind("docker")
    assert local == Kind("local", runs_images=False, bridged=True, backend="sandboxes.local:LocalSandbox")
    assert docker == Kind("docker", runs_images=True, bridged=True, backend="sandboxes.docker:DockerSandbox")
    podman = sandbox_kind("harbor:podman")
    assert podman == Kind(
        "harbor:podman", runs_images=True, bridged=False, harbor_type="podman", backend="sandboxes.harbor:HarborSandbox"
    )
    assert local.harbor_type is None and docker.harbor_type is None


@pytest.mark.parametrize("name", ["local", "docker", "harbor:podman"])
def test_every_kinds_backend_is_a_sandbox_class_with_create(name):
    import importlib

    module, _, attribute = sandbox_kind(name).backend.partition(":")
    backend = getattr(importlib.import_module(module), attribute)
    assert callable(backend.create) and backend.__module__ == module


async def test_a_kind_without_a_backend_is_refused_naming_the_fix():
    with pytest.raises(SandboxError, match="no backend for sandbox kind 'toy': name its Sandbox class in KINDS"):
        await Kind("toy", runs_images=False, bridged=True).create(None, {})


@pytest.mark.parametrize("name", ["harbor:", "harbor:  ", "vm", "Docker", "", "podman"])
def test_other_kind_names_are_refused_listing_the_kinds(name):
    listed = ", ".join(kind_names())  # local, docker, harbor:<type>, and any kind added to KINDS
    assert listed.startswith("local, docker") and listed.endswith("harbor:<type>")
    with pytest.raises(SandboxError, match=f"one of {re.escape(listed)}") as refused:
        sandbox_kind(name)
    assert repr(name) in str(refused.value)


def test_option_values_that_are_json_are_decoded_and_others_kept_as_strings():
    options = option_pairs(
        ["cpus=2", "ratio=0.5", "ports=[80, 443]", "keep=true", "none=null", "region=us-east-1", "empty="]
    )
    assert options == {
        "cpus": 2,
        "ratio": 0.5,
        "ports": [80, 443],
        "keep": True,
        "none": None,
        "region": "us-east-1",
        "empty": "",
    }


def test_an_option_value_may_contain_equals_signs_and_keys_are_stripped():
    assert option_pairs([" url =a=b", "x=={}"]) == {"url": "a=b", "x": "={}"}
    assert option_pairs([]) == {}


@pytest.mark.parametrize("pair", ["noequals", "=x", " =x", ""])
def test_an_option_without_a_key_or_an_equals_sign_is_refused_naming_the_form(pair):
    with pytest.raises(SandboxError, match="key=value") as refused:
        option_pairs(["good=1", pair])
    assert repr(pair) in str(refused.value)


def test_local_gets_its_isolation_checked_once(monkeypatch):
    monkeypatch.setattr("sandboxes.bwrap.bwrap_path", lambda: "/usr/bin/bwrap")
    assert backend_options(sandbox_kind("local"), allow_unisolated=False) == {"isolation": "bwrap"}
    monkeypatch.setattr("sandboxes.bwrap.bwrap_path", lambda: None)
    with pytest.raises(SandboxError, match="apt-get install -y bubblewrap"):
        backend_options(sandbox_kind("local"), allow_unisolated=False)


def test_harbor_gets_the_given_options_as_they_are():
    given = {"region": "eu", "cpus": 2, "keep_containers": True}
    options = backend_options(sandbox_kind("harbor:daytona"), allow_unisolated=False, given=given)
    assert options == given and options is not given
    assert backend_options(sandbox_kind("harbor:podman"), allow_unisolated=False) == {}


def test_docker_takes_no_options():
    assert backend_options(sandbox_kind("docker"), allow_unisolated=False) == {}
    assert backend_options(sandbox_kind("docker"), allow_unisolated=False, given={}) == {}
    with pytest.raises(SandboxError, match=r"--sandbox-option is for harbor:<type> sandboxes, not docker"):
        backend_options(sandbox_kind("docker"), allow_unisolated=False, given={"cpus": 2})


def test_local_options_cannot_override_the_checked_isolation(monkeypatch):
    monkeypatch.setattr("sandboxes.bwrap.bwrap_path", lambda: "/usr/bin/bwrap")
    with pytest.raises(SandboxError, match="--sandbox-option"):
        backend_options(sandbox_kind("local"), allow_unisolated=False, given={"isolation": "subprocess"})


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/r/tok/v1",
        "http://127.1.2.3/r/tok/v1",
        "http://localhost:8000/r/tok/v1",
        "https://localhost/v1",
        "http://[::1]:8000/r/tok/v1",
        "http://0.0.0.0:8000/r/tok/v1",
        "http://[::]:8000/v1",
        "http://[::ffff:127.0.0.1]:8000/v1",
        "http://[0:0:0:0:0:0:0:1]/v1",
        "http://localhost.:8000/v1",
        "http://gw.localhost/v1",
    ],
)
def test_a_loopback_gateway_url_is_refused_naming_public_url(url):
    with pytest.raises(SandboxError, match="--public-url") as refused:
        public_url(url, "harbor:podman")
    assert "harbor:podman" in str(refused.value) and url in str(refused.value)


@pytest.mark.parametrize(
    "url", ["http://10.0.0.5:8000/r/tok/v1", "https://gateway.example.com/r/tok/v1", "http://[2001:db8::1]:9000/v1"]
)
def test_a_reachable_gateway_url_is_given_unchanged(url):
    assert public_url(url, "harbor:daytona") == url


def test_a_malformed_gateway_url_is_refused_before_the_loopback_check():
    with pytest.raises(SandboxError, match="is not http"):
        public_url("ftp://gateway.example.com/", "harbor:podman")
