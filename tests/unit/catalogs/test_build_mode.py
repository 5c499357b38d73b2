"""`llm-d-launcher catalog build` runs at image build time as root and `run` reads its output as the
user the pod runs as: the catalogue must be readable by every user (0644), whatever the umask. Written
0600 (tempfile's mode), a non-root container exited 2 ("Permission denied") before starting anything
(found by the images tier, tests/images)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from launcher.catalogs.build import build_catalog

BUILT_IN = Path(__file__).parents[3] / "roles" / "catalogs" / "vllm-serve-0.32.0.json"


@pytest.fixture
def engine_python(tmp_path: Path) -> str:
    """A stand-in interpreter whose 'generator' prints the built-in vLLM 0.32.0 catalogue."""
    script = tmp_path / "python"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write(open({str(BUILT_IN)!r}).read())\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize("umask", [0o022, 0o077], ids=["umask-022", "umask-077"])
def test_the_catalogue_is_readable_by_every_user(engine_python: str, tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        path = build_catalog("vllm", engine_python, str(tmp_path / "out"))
    finally:
        os.umask(old)
    assert path.name == "vllm-serve-0.32.0.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert path.read_text() == BUILT_IN.read_text()


def test_a_generator_output_that_is_no_catalogue_is_one_line(tmp_path: Path) -> None:
    """vLLM 0.27.1 logs `INFO ... Triton not installed` to stdout at import: what the generator printed
    was no JSON, and `catalog build` died with a JSONDecodeError traceback (seen before the fix)."""
    from launcher.contract.errors import ConfigError

    script = tmp_path / "python"
    script.write_text(f"#!{sys.executable}\nprint('INFO importing.py:88 Triton not installed')\n")
    script.chmod(0o755)
    with pytest.raises(ConfigError) as caught:
        build_catalog("vllm", str(script), str(tmp_path / "out"))
    assert "printed no flag catalogue" in str(caught.value)
    assert not (tmp_path / "out").exists()
