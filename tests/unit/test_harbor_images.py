"""Images for Harbor's cloud types: pushed to the registry named by --sandbox-option image_registry, once per id.

`docker` here is a stand-in on PATH that records its command lines (no registry is reachable from these
machines); podman's copy from Docker runs for real in tests/integration/test_harbor_podman.py.
"""

from __future__ import annotations

import asyncio
import os
import stat

import pytest

from sandboxes import SandboxError, SandboxSpec
from sandboxes.harbor import HarborSandbox
from sandboxes.harbor_images import in_registry

FAKE_DOCKER = """#!/bin/sh
echo "$*" >> "$DOCKER_LOG"
case "$1 $2" in
  "image inspect") echo "sha256:$(cat "$IMAGE_ID")" ;;
  "push "*) [ -z "$FAIL_PUSH" ] || { echo "denied: requested access to the resource is denied"; exit 1; } ;;
esac
"""


@pytest.fixture
def docker_log(tmp_path, monkeypatch):
    (tmp_path / "docker").write_text(FAKE_DOCKER)
    (tmp_path / "docker").chmod(stat.S_IRWXU)
    (tmp_path / "id").write_text("aaa")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DOCKER_LOG", str(tmp_path / "log"))
    monkeypatch.setenv("IMAGE_ID", str(tmp_path / "id"))
    return tmp_path / "log"


def test_an_image_is_tagged_and_pushed_once_per_id_and_named_by_its_registry(docker_log):
    registry = "registry.example.com/team-a"
    name = asyncio.run(in_registry("harnessrl/pi:latest", registry))
    assert name == f"{registry}/harnessrl/pi:latest"
    assert asyncio.run(in_registry("harnessrl/pi:latest", registry)) == name  # the same id: not pushed again
    pushes = [line for line in docker_log.read_text().splitlines() if line.startswith(("tag", "push"))]
    assert pushes == [f"tag harnessrl/pi:latest {name}", f"push {name}"]
    (docker_log.parent / "id").write_text("bbb")  # rebuilt: a new id is pushed again
    asyncio.run(in_registry("harnessrl/pi:latest", registry))
    assert docker_log.read_text().count(f"push {name}") == 2


def test_a_refused_push_names_docker_login(docker_log, monkeypatch):
    monkeypatch.setenv("FAIL_PUSH", "1")
    with pytest.raises(SandboxError, match=r"docker login registry\.example\.com/team-b.*denied"):
        asyncio.run(in_registry("harnessrl/pi:latest", "registry.example.com/team-b"))


def test_the_registry_option_is_harnessrls_and_never_reaches_harbor():
    sandbox = HarborSandbox(SandboxSpec(image="harnessrl/pi:latest"), "daytona", {"image_registry": "r.io/x", "ttl": 5})
    try:
        assert sandbox.registry == "r.io/x"
        assert sandbox.start_request("r.io/x/harnessrl/pi:latest")["options"] == {"ttl": 5}
    finally:
        asyncio.run(sandbox.close())
