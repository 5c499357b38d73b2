"""docs/reference/ is generated from the one place each fact is declared (scripts/generate_docs.py);
one drift test per generated file fails when the committed text differs from what the code says."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_docs", ROOT / "scripts" / "generate_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()


@pytest.mark.parametrize("name", sorted(GENERATOR.GENERATED))
def test_generated_reference_matches_the_code(name: str) -> None:
    committed = (ROOT / "docs" / "reference" / name).read_text(encoding="utf-8")
    assert committed == GENERATOR.GENERATED[name](), (
        f"docs/reference/{name} drifted from the code: run `python scripts/generate_docs.py --write`"
    )


def test_check_fails_on_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--check compares, it does not rewrite: a hand-edited file makes it exit 1 and name the file."""
    for name, render in GENERATOR.GENERATED.items():
        (tmp_path / name).write_text(render(), encoding="utf-8")
    monkeypatch.setattr(GENERATOR, "REFERENCE", tmp_path)
    assert GENERATOR.main(["--check"]) == 0
    (tmp_path / "exit-codes.md").write_text("| 5 | hand-edited |\n", encoding="utf-8")
    assert GENERATOR.main(["--check"]) == 1
    assert GENERATOR.stale() == ["exit-codes.md"]


def test_the_generator_runs_as_a_script() -> None:
    out = subprocess.run(
        [sys.executable, "scripts/generate_docs.py", "--print", "exit-codes.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == GENERATOR.GENERATED["exit-codes.md"]()
