"""Time from the engine answering /health to the launcher's /readyz 200, with and without the capability
checks (LLMD_CAPABILITY_SECONDS 60 vs 0), over the STAND-IN engine of tests/standins/vllm serving the
render endpoints (--enable-scale-out), its metrics, the KV pool size and a KV-event publisher and
replay endpoint: every kind of probe but the TCP ones. Goal: the checks add at most 1 s (issue #39).
Writes bench/results/capabilities.md. Run: .venv/bin/python bench/capabilities_bench.py [ROUNDS]"""

from __future__ import annotations

import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.supervisor.test_capabilities import capability_pod  # noqa: E402

GOAL = 1.0  # seconds the checks may add


def one(workdir: Path, capability_seconds: str) -> float:
    pool = (
        "    args: {enable-scale-out: true, max-model-len: 1024}\n"
        "    kv_events: {port: {kv}, replay_port: {replay}}\n"
        "    capabilities: [api.render.completions, api.render.chat-completions]\n"
    )
    pod = capability_pod(workdir, pool, {"LLMD_CAPABILITY_SECONDS": capability_seconds}).start()
    port = pod.port
    healthy = None
    try:
        with httpx.Client(timeout=1) as client:
            while True:
                now = time.monotonic()
                if healthy is None:
                    try:
                        if client.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                            healthy = now
                    except httpx.HTTPError:
                        pass
                if healthy is not None and pod.probe("readyz")[0] == 200:
                    return time.monotonic() - healthy
                time.sleep(0.01)
    finally:
        pod.signal(signal.SIGTERM)
        pod.finish()


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    seen: dict[str, list[float]] = {"0": [], "60": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            for seconds in seen:
                seen[seconds].append(one(Path(tmp) / f"{seconds}-{i}", seconds))
    off, on = statistics.median(seen["0"]), statistics.median(seen["60"])
    added = on - off
    verdict = "met" if added <= GOAL else "NOT MET"
    text = (
        f"# Capability checks and time to ready — {time.strftime('%Y-%m-%d')}, {platform.machine()} "
        f"Python {platform.python_version()}\n\n"
        "Engine /health first 200 → launcher /readyz first 200, stand-in engine (the pods of "
        "tests/supervisor/test_capabilities.py, LLMD_CHECK_INTERVAL 0.2 s) "
        f"(bench/capabilities_bench.py), {rounds} pods each, median.\n\n"
        f"**Goal: the capability checks add at most {GOAL:g} s.**\n\n"
        "| LLMD_CAPABILITY_SECONDS | median | min | max |\n|---|---:|---:|---:|\n"
        + "".join(
            f"| {s} ({'checks' if s != '0' else 'no checks'}) | {statistics.median(v):.2f} s | "
            f"{min(v):.2f} s | {max(v):.2f} s |\n"
            for s, v in seen.items()
        )
        + f"\nAdded: {added:.2f} s: **{verdict}**. The checks run once the engine and every other readiness "
        "check pass (render POSTs, /metrics families, the KV pool size, a ZMQ handshake and a replay "
        "request, concurrently); nothing is added to the request path.\n"
    )
    (ROOT / "bench" / "results" / "capabilities.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
