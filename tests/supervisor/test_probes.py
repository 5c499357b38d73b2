"""The launcher's probe server under `run`, over the STAND-IN engine (tests/standins/vllm, which prints
vLLM's own start-up lines and serves /health like vLLM). The real engine: tests/engines/test_run_vllm.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.pods import LauncherPod
from tests.supervisor.conftest import MakePod


def watch_startup(pod: LauncherPod, timeout: float = 20.0) -> list[tuple[int | None, dict[str, Any]]]:
    """Every /startupz answer until the first 200."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = pod.probe("startupz")
        seen.append((status, body))
        if status == 200:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"never started: {seen[-3:]}\n{pod.output()}")


def test_startup_reports_phase_and_weight_progress_then_ready(make_pod: MakePod) -> None:
    pod = make_pod({"STANDIN_ENGINE": "slow-start=3", "LLMD_CHECK_INTERVAL": "0.2"}).start()
    status: int | None = None
    body: dict[str, Any] = {}
    while status is None:  # the server is up before preflight; nothing else is
        status, body = pod.probe("readyz")
    assert status == 503 and "start-up" in body["failing"]
    seen = watch_startup(pod)
    phases = [body["phase"] for status, body in seen if status == 503]
    assert "loading weights" in phases and "initializing engine" in phases
    assert phases.index("loading weights") < phases.index("initializing engine")
    ratios = {body["weights_loaded_ratio"] for _, body in seen if "weights_loaded_ratio" in body}
    assert ratios & {0.25, 0.5, 0.75} and max(ratios) == 1.0  # the bar's shards, 1/4 .. 4/4
    loading = next(body for _, body in seen if body.get("weights_loaded_ratio") == 0.5)
    assert loading["shards"] == [
        {"rank": None, "what": "Loading safetensors checkpoint shards", "loaded": 2, "total": 4}
    ]
    assert "waiting_for" in loading and loading["waiting_for"].startswith("engine: ")
    final = seen[-1][1]
    assert final["started"] is True and final["phase"] == "started" and final["startup_seconds"] > 2.5
    ready = pod.wait_probe("readyz", 200, timeout=5)
    assert ready == {
        "ready": True,
        "phase": "started",
        "checks": {
            "engine": {"ok": True, "detail": f"GET :{pod.port}/health: 200"},
            "render": {"ok": True, "detail": ready["checks"]["render"]["detail"]},
            # the router's scorer metrics (roles/capabilities.py), checked before the first 200
            "capabilities": {"ok": True, "detail": "every required capability present"},
        },
    }
    # the busy bound (LLMD_STEP_SECONDS) is stated while live (#32)
    assert pod.probe("livez") == (200, {"live": True, "phase": "started", "step_seconds": 180.0})
    pod.signal(signal.SIGTERM)
    assert pod.finish() == 0


def test_engine_death_fails_liveness_before_the_launcher_exits(make_pod: MakePod) -> None:
    pod = make_pod(
        {"LLMD_CHECK_INTERVAL": "0.1", "STANDIN_RENDER": "ignore-term", "LLMD_GRACE_SECONDS": "12"}
    )
    pod.start()
    pod.wait_probe("readyz", 200)
    engine = pod.children()["engine"]
    engine.kill()
    # The render sidecar ignores SIGTERM, so the launcher takes its crash window (2 s + 1 s) to exit.
    live = pod.wait_probe("livez", 503, timeout=2)
    assert live == {"live": False, "reason": "engine was killed by SIGKILL"}
    status, ready = pod.probe("readyz")
    assert status == 503 and ready["phase"] == "stopping"
    assert pod.proc is not None and pod.proc.poll() is None  # still stopping the sidecar
    assert pod.finish() == 137
    assert pod.leftovers() == []


def test_sigterm_turns_readiness_off_at_once(make_pod: MakePod) -> None:
    # The render sidecar ignores SIGTERM, so the launcher is still stopping while we look.
    pod = make_pod({"STANDIN_RENDER": "ignore-term", "LLMD_GRACE_SECONDS": "6"}).start()
    pod.wait_probe("readyz", 200)
    pod.signal(signal.SIGTERM)
    body = pod.wait_probe("readyz", 503, timeout=0.5)
    assert body["failing"] == {"pod": "shutting down"} and body["phase"] == "stopping"
    assert pod.probe("livez")[0] == 200  # a requested stop is not a failure
    assert pod.finish() == 0


def test_worker_is_ready_while_its_engine_lives_and_the_leader_is_reachable(make_pod: MakePod) -> None:
    lws = {"LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"}
    pod = make_pod({**lws, "LLMD_CHECK_INTERVAL": "0.1"}, nodes=2, render=False).start()
    pod.wait_for("engine | stand-in engine up")
    body = pod.wait_probe("startupz", 503, timeout=5, until=lambda b: "leader" in b.get("waiting_for", ""))
    assert body["waiting_for"] == f"leader: connect 127.0.0.1:{pod.port}: Connection refused"
    # A STAND-IN for the leader pod's API: a listening socket on the leader's port.
    leader = socket.create_server(("127.0.0.1", pod.port))
    try:
        assert pod.wait_probe("startupz", 200, timeout=5)["started"] is True
        ready = pod.wait_probe("readyz", 200, timeout=5)
        assert set(ready["checks"]) == {"engine", "leader"}
    finally:
        leader.close()
    body = pod.wait_probe("readyz", 503, timeout=5)
    assert list(body["failing"]) == ["leader"]
    assert pod.probe("livez")[0] == 200  # the leader being away is not this pod's death
    pod.signal(signal.SIGTERM)
    assert pod.finish() == 0


def probe_cli(which: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "probe", which, *args],
        capture_output=True,
        text=True,
        timeout=20,
        env={**os.environ, **(env or {})},
    )
    return result.returncode, result.stdout + result.stderr


def test_exec_probe_exits_from_the_probe_servers_answer(make_pod: MakePod) -> None:
    pod = make_pod({"STANDIN_ENGINE": "slow-start=3"}).start()
    port = str(pod.probe_port)
    pod.wait_probe("livez", 200)
    code, out = probe_cli("ready", "--port", port)
    assert code == 1 and out.startswith("ready: 503 ") and "start-up: not started" in out
    code, out = probe_cli("live", env={"LLMD_PROBE_PORT": port})
    assert code == 0 and out.startswith('live: 200 {"live":true,')
    pod.wait_probe("readyz", 200, timeout=15)
    assert probe_cli("ready", "--port", port)[0] == 0
    assert probe_cli("startup", "--port", port)[0] == 0
    pod.signal(signal.SIGTERM)
    assert pod.finish() == 0
    code, out = probe_cli("live", "--port", port, "--timeout", "0.5")
    assert code == 1 and out.startswith(f"live: no answer from the launcher on 127.0.0.1:{port}/livez")


def test_exec_probe_bad_input_exits_2() -> None:
    code, out = probe_cli("live", env={"LLMD_PROBE_PORT": "eighty"})
    assert code == 2 and "LLMD_PROBE_PORT='eighty' is not a port number" in out
    code, out = probe_cli("alive")
    assert code == 2 and "invalid choice: 'alive'" in out


def test_busy_probe_port_is_a_one_line_error_and_nothing_starts(make_pod: MakePod) -> None:
    holder = socket.create_server(("127.0.0.1", 0))
    try:
        pod = make_pod()
        pod.probe_port = holder.getsockname()[1]
        pod.start()
        assert pod.finish() == 2
        where = f"127.0.0.1:{pod.probe_port}"
        reason = f"Address already in use, held by pid {os.getpid()}"
        assert f"error: LLMD_PROBE_PORT: the probe server cannot listen on {where}: {reason}" in pod.stderr
        assert "process=engine" not in pod.stderr and pod.leftovers() == []
    finally:
        holder.close()


def test_metrics_describe_processes_checks_and_startup(make_pod: MakePod) -> None:
    pod = make_pod()
    pod.env["STANDIN_RENDER"] = f"crash-first=1@{pod.workdir / 'render-starts'}"
    pod.start()
    pod.wait_probe("readyz", 200)
    for endpoint in ("livez", "readyz", "startupz"):
        pod.probe(endpoint)
    import httpx

    text = httpx.get(f"http://127.0.0.1:{pod.probe_port}/metrics").text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("llmd_launcher_process_up", (("process", "engine"),))] == 1
    assert samples[("llmd_launcher_process_up", (("process", "render"),))] == 1
    assert samples[("llmd_launcher_process_restarts_total", (("process", "render"),))] == 1
    assert samples[("llmd_launcher_process_last_exit_code", (("process", "render"),))] == 1
    assert samples[("llmd_launcher_ready", ())] == 1 and samples[("llmd_launcher_live", ())] == 1
    assert samples[("llmd_launcher_check_up", (("check", "render"),))] == 1
    assert samples[("llmd_launcher_startup_phase", (("phase", "started"),))] == 1
    assert samples[("llmd_launcher_startup_phase", (("phase", "loading weights"),))] == 0
    assert samples[("llmd_launcher_startup_duration_seconds", ())] > 0
    assert samples[("llmd_launcher_probe_duration_seconds_count", (("endpoint", "readyz"),))] >= 1
    pod.signal(signal.SIGTERM)
    assert pod.finish() == 0
