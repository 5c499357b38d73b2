"""Liveness benchmark (results: bench/results/liveness.md).

1. SIGSTOP of an engine the watch has just seen make progress (a completion, then the launcher's
   forward_last_progress moves: the stop comes at the worst moment, a whole window ahead) -> the
   launcher's verdict (/livez 503) and the pod's exit (code 5), over >= 20 trials with the stand-in
   engine (tests/standins/vllm: SIGSTOP stops its HTTP server, /metrics included, as a stopped API
   server does); vLLM's own backstop is VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS = 300 s (vLLM 0.32.0
   vllm/envs.py), stated, not waited for.
2. The canary's cost idle: canaries and launcher CPU seconds over a few minutes with a short
   LLMD_STALL_SECONDS, extrapolated to an hour at the default (60 s).

    .venv/bin/python bench/liveness_bench.py [--trials 20] [--idle 120]
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.pods import STANDINS, LauncherPod  # noqa: E402
from tests.ports import free_port  # noqa: E402
from tests.supervisor.conftest import write_recipe  # noqa: E402

STALL, CANARY, INTERVAL, TIMEOUT = 2.0, 2.0, 0.5, 1.0
BACKSTOP = 300.0  # vLLM's VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS default


def pod(workdir: Path, extra: dict[str, str]) -> LauncherPod:
    port = free_port()
    env = {
        "LLMD_RECIPE_FILE": str(write_recipe(workdir, port=port, render_port=None)),
        "POD_IP": "127.0.0.1",
        "LLMD_BIN_PATH": str(STANDINS),
        "LLMD_GRACE_SECONDS": "6",  # a stalled engine that ignores SIGTERM is SIGKILLed after the kill margin
        **extra,
    }
    return LauncherPod(workdir, env, port=port)


def launcher_metric(p: LauncherPod, name: str) -> float | None:
    text = httpx.get(f"http://127.0.0.1:{p.probe_port}/metrics", timeout=5).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name)]
    return sum(values) if values else None


def progress_then_stop(p: LauncherPod) -> float:
    """A completion, then SIGSTOP as soon as the watch has seen its tokens: the monotonic time of the
    stop. The watch's first look comes within an interval of start-up; waited for first."""
    name = "llmd_launcher_forward_last_progress_timestamp_seconds"
    deadline = time.monotonic() + 10
    while launcher_metric(p, name) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    before = launcher_metric(p, name)
    body = {"model": "m", "prompt": "Hi", "max_tokens": 1}
    assert httpx.post(f"http://127.0.0.1:{p.port}/v1/completions", json=body, timeout=5).status_code == 200
    while launcher_metric(p, name) == before and time.monotonic() < deadline:
        time.sleep(0.01)
    p.children()["engine"].send_signal(signal.SIGSTOP)
    return time.monotonic()


def stall_trial(workdir: Path) -> tuple[float, float, int, str]:
    p = pod(
        workdir,
        {
            "LLMD_STALL_SECONDS": str(STALL),
            "LLMD_CANARY_SECONDS": str(CANARY),
            "LLMD_CHECK_INTERVAL": str(INTERVAL),
            "LLMD_CHECK_TIMEOUT": str(TIMEOUT),
        },
    ).start()
    try:
        p.wait_probe("startupz", 200)
        stopped = progress_then_stop(p)
        # The verdict: /livez 503 or, when the pod ends before a poll sees the 503, its exit.
        assert p.proc is not None
        while p.probe("livez")[0] != 503 and p.proc.poll() is None and time.monotonic() - stopped < 30:
            time.sleep(0.05)
        verdict = time.monotonic() - stopped
        code = p.finish(timeout=60)
        gone = time.monotonic() - stopped
        return verdict, gone, code, p.termination_log.read_text().splitlines()[0]
    finally:
        p.kill_everything()


def idle_cost(workdir: Path, seconds: float, stall: float) -> tuple[int, float]:
    p = pod(workdir, {"LLMD_STALL_SECONDS": str(stall), "LLMD_CANARY_SECONDS": str(CANARY)}).start()
    try:
        p.wait_probe("startupz", 200)
        launcher = psutil.Process(p.pid)
        cpu0 = sum(launcher.cpu_times()[:2])
        time.sleep(seconds)
        cpu = sum(launcher.cpu_times()[:2]) - cpu0
        _, body = p.probe("livez")
        sent = int(launcher_metric(p, "llmd_launcher_forward_canaries_total") or 0)
        assert body["live"], body
        p.signal(signal.SIGTERM)
        p.finish()
        return sent, cpu
    finally:
        p.kill_everything()


def pct(values: list[float], q: float) -> float:
    """The nearest-rank percentile: the smallest value that q of the values do not exceed."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--idle", type=float, default=120.0)
    args = parser.parse_args()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        verdicts, exits, codes = [], [], []
        for i in range(args.trials):
            work = Path(tmp) / f"t{i}"
            work.mkdir()
            verdict, gone, code, first = stall_trial(work)
            verdicts.append(verdict)
            exits.append(gone)
            codes.append(code)
        bound = STALL + CANARY + INTERVAL  # a /metrics read in flight holds no tick (healthchecks/forward.py)
        print(
            f"stand-in, {args.trials} trials; stall {STALL:g} s, canary {CANARY:g} s, "
            f"interval {INTERVAL:g} s, /metrics timeout {TIMEOUT:g} s; "
            f"load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after"
        )
        print(f"  exit codes: {sorted(set(codes))}; first line: {first}")
        for name, values in (("SIGSTOP -> /livez 503", verdicts), ("SIGSTOP -> pod exit", exits)):
            print(
                f"  {name}: median {statistics.median(values):.2f} s, p95 {pct(values, 0.95):.2f} s, "
                f"max {max(values):.2f} s (bound stall+canary+interval = {bound:g} s)"
            )
            print(f"    sorted: {' '.join(f'{v:.2f}' for v in sorted(values))}")
        print(f"  vLLM's own backstop: VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS = {BACKSTOP:g} s")
        work = Path(tmp) / "idle"
        work.mkdir()
        stall = 5.0
        sent, cpu = idle_cost(work, args.idle, stall)
        per_hour_default = 3600 / 60.0
        print(
            f"idle {args.idle:g} s at LLMD_STALL_SECONDS={stall:g}: {sent} canaries, "
            f"launcher CPU {cpu:.2f} s "
            f"({100 * cpu / args.idle:.2f} % of a core); at the default 60 s: {per_hour_default:.0f} "
            f"canaries/h (one token each), launcher CPU ~{cpu / args.idle * 3600:.0f} s/h upper bound"
        )


if __name__ == "__main__":
    main()
