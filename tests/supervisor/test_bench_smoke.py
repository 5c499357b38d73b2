"""bench/supervisor_bench.py, shortened: a benchmark that cannot run is a defect (it once stopped
running when preflight began to require a tokenizer beside the stand-in model, and nobody saw).
The numbers are the benchmark's business (bench/results/supervisor.md), not asserted here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHORT = ["--runs", "2", "--step-runs", "2", "--cycles", "1", "--idle-seconds", "0.5", "--skip-vllm"]


def test_the_supervisor_benchmark_runs_and_prints_every_table() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "supervisor_bench.py"), *SHORT],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = [line.split(" | ")[0].lstrip("| ") for line in out.stdout.splitlines() if line.startswith("| ")]
    for measure in (
        "engine SIGKILL -> launcher exit, p99",
        "... as PID 1 of a PID namespace (a pod's /proc), median / p99",
        "dependencies imported, nothing of ours: RSS (USS)",
        "... with KV events on (USS)",
        "start/stop cycles: leftover processes",
        "SIGCHLD: engine reaped",
        "descendant sweep done",
        "launcher exit seen by its parent",
    ):
        assert measure in rows, out.stdout
