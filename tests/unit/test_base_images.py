"""A task's base image that cannot be pulled is named, with the remedy (harnesses/base_images.py)."""

from __future__ import annotations

from harnesses.base_images import base_images, unpullable_base

NO_REGISTRY = (
    'Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io on 10.0.0.53:53: no such host'
)


def test_the_base_images_are_the_from_lines_without_earlier_stages():
    dockerfile = (
        "ARG X=1\nFROM --platform=linux/amd64 python:3.11-slim AS build\nRUN true\n"
        "from build as test\nFROM debian@sha256:abc\nFROM python:3.11-slim\n"
    )
    assert base_images(dockerfile) == ["python:3.11-slim", "debian@sha256:abc"]


def test_an_unreachable_registry_names_the_image_and_how_to_provide_it():
    said = unpullable_base(NO_REGISTRY, "FROM python:3.11-slim\nWORKDIR /app\n")
    assert "'python:3.11-slim'" in said and "no registry is reachable" in said
    assert "docker load" in said and "mirror" in said and "digest" not in said


def test_a_digest_pinned_base_says_it_needs_that_exact_image():
    said = unpullable_base(f"pull access denied: {NO_REGISTRY}", "FROM ubuntu@sha256:0123\n")
    assert "'ubuntu@sha256:0123'" in said and "needs that exact image" in said


def test_other_build_errors_are_left_as_they_are():
    assert unpullable_base("The command '/bin/sh -c exit 3' returned a non-zero code: 3", "FROM x\n") is None
