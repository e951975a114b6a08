"""The CPU and the GPU installs resolve with their per-platform pins (a pip dry-run against PyPI; nothing is
installed): the main dependencies do not fight vllm's exact torch and transformers."""

from __future__ import annotations

import pytest

from tests.install_check import INSTALLS, pins, resolve


@pytest.mark.parametrize("install", list(INSTALLS))
def test_the_install_resolves_to_its_pins(install):
    result = resolve(install)
    assert result.ok, result.error
    for name, version in pins(install).items():
        assert result.versions.get(name, "").split("+")[0] == version, (name, result.versions.get(name))
    assert "harnessrl" in result.versions and "peft" in result.versions
