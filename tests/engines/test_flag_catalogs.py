"""roles/catalogs/*.json are exactly what the installed engines' own parsers say."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.engines.engine_venvs import REPO, engine_bin

pytestmark = pytest.mark.engines


@pytest.mark.parametrize(
    ("venv", "script", "name"),
    [("vllm", "vllm_serve.py", "vllm-serve"), ("sglang", "sglang_server.py", "sglang-server")],
)
def test_catalogue_matches_the_engine(venv: str, script: str, name: str, tmp_path: Path) -> None:
    fresh = subprocess.run(
        [str(engine_bin(venv, "python")), str(REPO / "scripts" / "flag_catalogs" / script)],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "VLLM_TARGET_DEVICE": "cpu"},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    committed = (REPO / "roles" / "catalogs" / f"{name}.json").read_text()
    assert fresh == committed, f"{name}.json is stale: run scripts/update-flag-catalogs.sh"
