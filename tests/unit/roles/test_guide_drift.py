"""scripts/guide_drift.py, the way a guide is bumped (docs/adding-a-guide.md): against the stored copies
of the guides' pod files (tests/fixtures/guides/upstream/: llm-d/llm-d's files, Apache-2.0, verbatim, each
at its recipe's guide.commit, read through the code index) it prints nothing, so every fixture's pinned
facts are the file's; against an edited copy it prints the change."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "guides"
STORED = FIXTURES / "upstream"
PD_VLLM = "guides/pd-disaggregation/modelserver/gpu/vllm/base/disaggregatedset.yaml"


def drift(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "guide_drift.py"), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def pod_sources(fixture: Path) -> set[str]:
    data = yaml.safe_load(fixture.read_text())
    return {data["sources"][pod["source"]]["path"] for pod in data["pods"].values()}


def test_every_pod_source_is_stored_and_the_pins_are_its_facts() -> None:
    for fixture in FIXTURES.glob("*.yaml"):
        assert all((STORED / path).is_file() for path in pod_sources(fixture)), fixture.name
    done = drift()
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_an_upstream_change_is_printed_fact_by_fact(tmp_path: Path) -> None:
    shutil.copytree(STORED, tmp_path, dirs_exist_ok=True)
    edited = tmp_path / PD_VLLM
    text = edited.read_text()
    for old, new in [
        ("  slices: 1\n", "  slices: 3\n"),
        ('"--tensor-parallel-size=4"', '"--tensor-parallel-size=8"'),
        ("--secure-serving=false", "--secure-serving=true"),
        ('value: "120"', 'value: "90"'),
    ]:
        assert old in text
        text = text.replace(old, new)
    edited.write_text(text)
    done = drift(str(tmp_path), "--recipe", "pd-disaggregation-gpu-vllm")
    assert done.returncode == 1 and not done.stderr
    lines = done.stdout.splitlines()
    prefix = f"pd-disaggregation-gpu-vllm: {PD_VLLM}: "
    assert all(line.startswith(prefix) for line in lines)
    facts = sorted(line.removeprefix(prefix) for line in lines)
    assert facts == [
        "decode: args: - --tensor-parallel-size=4 + --tensor-parallel-size=8",
        "decode: sidecar args: - --secure-serving=false + --secure-serving=true",
        "prefill: env: - ['VLLM_HTTP_TIMEOUT_KEEP_ALIVE=120'] + ['VLLM_HTTP_TIMEOUT_KEEP_ALIVE=90']",
        "slices: pinned 1, upstream 3",
    ]


def test_a_file_missing_or_reshaped_upstream_is_one_line_each(tmp_path: Path) -> None:
    """Bad input is named, never a traceback: the file gone, its roles gone, or not YAML."""
    where = f"pd-disaggregation-gpu-vllm: {PD_VLLM}: "
    done = drift(str(tmp_path), "--recipe", "pd-disaggregation-gpu-vllm")
    assert (done.returncode, done.stderr) == (1, "")
    assert done.stdout == f"{where}not read from {tmp_path}: FileNotFoundError\n"
    (tmp_path / PD_VLLM).parent.mkdir(parents=True)
    (tmp_path / PD_VLLM).write_text("kind: Deployment\n")
    done = drift(str(tmp_path), "--recipe", "pd-disaggregation-gpu-vllm")
    assert done.stdout.splitlines() == [
        f"{where}{p}: no DisaggregatedSet {p} in the file" for p in ("prefill", "decode")
    ]
    (tmp_path / PD_VLLM).write_text("a: [\n")
    done = drift(str(tmp_path), "--recipe", "pd-disaggregation-gpu-vllm")
    assert (done.stdout, done.stderr) == (f"{where}not read from {tmp_path}: ParserError\n", "")
