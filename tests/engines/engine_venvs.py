"""Real-engine tier: runs the engines' own parsers and binaries from their venvs beside the project's.

The venvs come from scripts/install-engines.sh (LLMD_VENVS, default <repo>/.venvs). A missing venv is
an error, not a skip: CI must never pass without having run these.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
VENVS = Path(os.environ.get("LLMD_VENVS", REPO / ".venvs"))
HERE = Path(__file__).parent


def engine_bin(venv: str, name: str) -> Path:
    path = VENVS / venv / "bin" / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/install-engines.sh {venv}")
    return path


def engine_env(workdir: Path) -> dict[str, str]:
    """An engine's environment on the test machine: per-run caches, no hub, CPU (vLLM vllm/envs.py)."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CACHE_ROOT": str(workdir / "vllm-cache"),
        "HF_HOME": str(workdir / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


def run_checker(venv: str, script: str, argvs: list[list[str]], tmp_path: Path) -> list[dict[str, Any]]:
    """Feed argvs to a checker script running in an engine venv; one process for all of them."""
    env = engine_env(tmp_path)
    proc = subprocess.run(
        [str(engine_bin(venv, "python")), str(HERE / script)],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: list[dict[str, Any]] = json.loads(proc.stdout)
    assert len(results) == len(argvs)
    return results


def make_tiny_model(out: Path, work: Path, *flags: str) -> Path:
    """tests/engines/tiny_model.py's model at `out` (built with the vllm venv; `work`: its caches),
    for the tiers and the benchmarks alike."""
    subprocess.run(
        [str(engine_bin("vllm", "python")), str(HERE / "tiny_model.py"), str(out), *flags],
        env=engine_env(work),
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out
