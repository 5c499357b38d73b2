"""Real-engine tier: runs the engines' own parsers and binaries from their venvs beside the project's.

The venvs come from scripts/install-engines.sh (LLMD_VENVS, default <repo>/.venvs). A missing venv is
an error, not a skip: CI must never pass without having run these.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
VENVS = Path(os.environ.get("LLMD_VENVS", REPO / ".venvs"))
HERE = Path(__file__).parent
# Built tiny models, one per (builder, flags, vLLM venv), shared by every tier and checkout.
_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llm-d-launcher"
TINY_MODELS = Path(os.environ.get("LLMD_TINY_MODELS", _CACHE / "tiny-models"))


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
    """tests/engines/tiny_model.py's model copied to `out` (the tiers and the benchmarks alike). It is
    built (with the vllm venv; `work`: its caches) once per builder, flags and venv into TINY_MODELS:
    a run of every tier asked for it seven times, 13 s each."""
    builder = HERE / "tiny_model.py"
    venv = VENVS / "vllm"
    stamp = [builder.read_text(), *flags, str(venv), str((venv / "pyvenv.cfg").stat().st_mtime_ns)]
    cached = TINY_MODELS / hashlib.sha256("\0".join(stamp).encode()).hexdigest()[:16]
    if not cached.is_dir():
        TINY_MODELS.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f".{cached.name}-", dir=TINY_MODELS))
        subprocess.run(
            [str(engine_bin("vllm", "python")), str(builder), str(building), *flags],
            env=engine_env(work),
            check=True,
            capture_output=True,
            timeout=300,
        )
        try:
            building.rename(cached)  # atomic: a run building the same model at once keeps its own
        except OSError:
            shutil.rmtree(building)
    shutil.copytree(cached, out, dirs_exist_ok=True)
    return out
