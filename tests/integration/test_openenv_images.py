"""`--tasks openenv:IMAGE` on this machine's real Docker daemon: what a user is told when it cannot work.

An environment image is run per rollout with its port 8000 published on 127.0.0.1. This machine kind's
engine has no bridge network (dockerd --bridge=none, no registry), so an image that is not here cannot be
pulled and a running one gets no published port: both say so and name what works instead (no traceback,
no wait for a health check that cannot answer).
"""

from __future__ import annotations

import io

import pytest

import docker
from harnesses.datasets import load_dataset
from harnesses.task import TaskError

BASE = "debian:bookworm-slim"  # the offline base image (docker/setup-daemon.sh)
SLEEPER = "harnessrl-test/openenv-sleeper:latest"


@pytest.fixture(scope="module")
def sleeper() -> str:
    """An image that runs and listens nowhere, built offline from the base image."""
    dockerfile = f'FROM {BASE}\nCMD ["sleep", "60"]\n'.encode()
    docker.from_env().images.build(fileobj=io.BytesIO(dockerfile), tag=SLEEPER, rm=True)
    return SLEEPER


def test_an_image_that_is_not_here_names_how_to_build_it_or_run_it_yourself():
    with pytest.raises(TaskError) as caught:
        load_dataset("openenv:harnessrl-test/no-such-env:latest")
    message = str(caught.value)
    assert "no such image on this Docker daemon" in message and "docker build -t harnessrl-test/no-such-env" in message
    assert "openenv:http://127.0.0.1:PORT" in message and "registry" not in message


def test_an_engine_without_a_bridge_network_says_so_and_leaves_no_container(sleeper):
    client = docker.from_env()
    before = {c.id for c in client.containers.list(filters={"ancestor": sleeper}, ignore_removed=True)}
    with pytest.raises(TaskError) as caught:
        load_dataset(f"openenv:{sleeper}")
    assert "published no port for the environment's 8000" in str(caught.value)
    assert "--bridge=none" in str(caught.value) and "openenv:http://127.0.0.1:PORT" in str(caught.value)
    assert {c.id for c in client.containers.list(filters={"ancestor": sleeper}, ignore_removed=True)} == before
