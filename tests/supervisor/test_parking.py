"""Parking (launcher/parking.py) over the stand-in engine: in an LWS group a mistake a restart cannot
fix keeps the launcher alive, says why on every probe, and starts the engine in the same process
once the mistake is fixed in place; SIGTERM ends it at once with the reason. Outside a group: exit 2
at once (test_faults.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from tests.pods import LauncherPod
from tests.supervisor.conftest import MakePod

# A group of one: LWS env present (a restart would recreate the group), no peer to wait for.
LWS = {"LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_GROUP_SIZE": "1", "LWS_WORKER_INDEX": "0"}


def _probe_command(pod: LauncherPod, which: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "probe", which, "--port", str(pod.probe_port)],
        capture_output=True,
        text=True,
        timeout=10,
    )
    return done.returncode, done.stdout


def test_a_recipe_mistake_parks_the_pod_and_the_fixed_file_starts_it_in_place(make_pod: MakePod) -> None:
    pod = make_pod(LWS)
    recipe = pod.workdir / "recipe.yaml"
    good = recipe.read_text()
    recipe.write_text(good.replace("    kind: vllm\n", "    kind: vllm\n    nodez: 1\n"))
    pod.start()
    live = pod.wait_probe("livez", 200)
    assert live["phase"] == "parked" and "nodez" in live["parked"], live
    for endpoint in ("startupz", "readyz"):
        status, body = pod.probe(endpoint)
        assert status == 503 and "nodez" in body["failing"]["parked"], body
    code, said = _probe_command(pod, "startup")  # what `kubectl describe pod` shows in the probe event
    assert code == 1 and said.startswith("startup: 503 parked: LLMD_RECIPE_FILE") and "nodez" in said, said
    metrics = __import__("httpx").get(f"http://127.0.0.1:{pod.probe_port}/metrics").text
    assert 'llmd_launcher_parked{heals="in place",setting="LLMD_RECIPE_FILE"} 1.0' in metrics
    time.sleep(1.5)
    assert pod.children() == {} and pod.proc is not None and pod.proc.poll() is None  # nothing spawned

    launcher = pod.pid
    recipe.write_text(good)  # the ConfigMap is fixed: the kubelet updates the mounted file in place
    fixed = time.monotonic()
    pod.wait_for("engine | stand-in engine up", timeout=60)
    to_engine = time.monotonic() - fixed
    print(f"fixed recipe file -> engine up: {to_engine:.1f} s")  # the note's measurement
    assert pod.pid == launcher and pod.proc is not None and pod.proc.poll() is None
    assert pod.wait_probe("startupz", 200)["started"] is True
    assert "no longer parked: the checks pass; starting" in pod.output()
    pod.signal(signal.SIGTERM)
    assert pod.finish() == 0 and pod.leftovers() == []


def test_a_failed_preflight_parks_and_sigterm_ends_it_promptly_with_the_reason(make_pod: MakePod) -> None:
    pod = make_pod(LWS)
    (pod.workdir / "model" / "config.json").unlink()  # the checkpoint is still being copied
    pod.start()
    pod.wait_for("parked: a restart would recreate the LWS group")
    assert pod.wait_probe("livez", 200)["phase"] == "parked"
    status, body = pod.probe("startupz")
    assert status == 503 and "holds no config.json" in body["failing"]["parked"]
    stopped = time.monotonic()
    pod.signal(signal.SIGTERM)
    code = pod.finish(timeout=10)
    assert code == 2 and time.monotonic() - stopped < 3, pod.output()
    message = pod.termination_log.read_text()
    assert message.startswith("model.path: ") and "holds no config.json" in message
    assert "parked" in message and "stopped by SIGTERM" in message
    assert "stand-in engine" not in pod.output() and pod.leftovers() == []


def test_parking_ends_with_exit_2_after_llmd_park_seconds(make_pod: MakePod) -> None:
    pod = make_pod({**LWS, "LLMD_PARK_SECONDS": "2"})
    (pod.workdir / "model" / "config.json").unlink()
    pod.start()
    began = time.monotonic()
    assert pod.finish(timeout=20) == 2, pod.output()
    assert 2 <= time.monotonic() - began < 8
    assert "LLMD_PARK_SECONDS=2 ran out" in pod.termination_log.read_text()


def test_a_preflight_warning_is_said_once_not_at_every_re_check(make_pod: MakePod) -> None:
    """Issue #40.7: the flag catalogue's warning (this venv has no vllm) came again at each re-check."""
    pod = make_pod(LWS, render=False)
    (pod.workdir / "model" / "config.json").unlink()
    pod.start()
    pod.wait_probe("livez", 200, until=lambda body: body.get("phase") == "parked")
    time.sleep(3.5)  # re-checks after 1 s and 2 s more
    assert pod.output().count("flag catalogue: flags were checked against") == 1, pod.output()
    pod.signal(signal.SIGTERM)
    assert pod.finish(timeout=10) in (0, 2)  # 0: the signal came during a re-check's preflight
