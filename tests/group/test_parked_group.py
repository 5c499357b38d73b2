"""Parking across a real group (issue #20 B): the guide's prefill shape (one vLLM engine, TP=2 over
two pods, gloo) where the worker's recipe file has a mistake. The worker parks; the leader's launcher
starts its engine and waits: it neither declares the parked worker lost nor runs out its start-up
deadline. Fixing the file (in place, as the kubelet updates a mounted ConfigMap) starts the worker's
engine in the same pod and the group forms: no launcher is replaced, nothing is recreated. Its deletion
then stops every pod cleanly (one formation for both: each costs about 3 minutes here)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.group.conftest import leftovers, prefill_recipe

pytestmark = pytest.mark.group

STARTUP = 85  # LLMD_STARTUP_SECONDS: shorter than the park, longer than the group's start once fixed
# The worker stays parked past the leader's unheld deadline; fixed just before its re-check at 91 s
# (launcher/parking.py: 1, 2, 4 ... 30 s apart), so the test does not wait out a 30 s back-off.
PARKED_FOR = STARTUP + 3
PEER_LOST = 5  # LLMD_PEER_LOST_SECONDS: a parked peer counted as lost would end the leader in seconds


def test_a_parked_worker_holds_its_group_until_the_file_is_fixed_in_place(
    start_group: Any, tp2_model: Path, tmp_path: Path
) -> None:
    shm_before = set(os.listdir("/dev/shm"))
    good = prefill_recipe(tmp_path / "recipe.yaml", tp2_model, render=False).read_text()
    worker_recipe = tmp_path / "worker-recipe.yaml"  # the worker's mounted ConfigMap
    worker_recipe.write_text(good.replace("    kind: vllm\n", "    kind: vllm\n    nodez: 2\n"))
    run = start_group(
        tmp_path / "recipe.yaml",
        "--pod-env", f"1:LLMD_RECIPE_FILE={worker_recipe}",
        env={"LLMD_STARTUP_SECONDS": str(STARTUP), "LLMD_PEER_LOST_SECONDS": str(PEER_LOST)},
    )  # fmt: skip
    launchers = [pod["pid"] for pod in run.pods()]

    # The worker parks on its recipe file; the leader sees it parked and holds its own deadline.
    run.wait("worker parked", lambda: run.probe(1, "livez")[1].get("phase") == "parked", 60)
    parked_at = time.monotonic()
    status, startup = run.probe(1, "startupz")
    assert status == 503 and "nodez" in startup["failing"]["parked"], startup
    run.wait("leader sees the parked worker", lambda: "group member parked" in run.pod_output(0), 30)
    print(f"[{parked_at - run.started:5.1f} s] worker parked; the leader's engine starts and waits")

    # Past the leader's own start-up deadline: both launchers alive, the leader not started, not lost.
    while time.monotonic() - parked_at < PARKED_FOR:
        assert [run.exit_code(0), run.exit_code(1)] == [None, None], run.digest()
        assert run.probe(0, "livez")[0] == 200 and run.probe(1, "livez")[0] == 200, run.digest()
        time.sleep(1)
    status, leader = run.probe(0, "startupz")
    assert status == 503 and leader["seconds"] > STARTUP, leader
    assert "engine |" not in run.pod_output(1)  # nothing of the worker's engine was spawned

    # The ConfigMap is fixed: the kubelet swaps the mounted file atomically, under the same name.
    fixing = worker_recipe.with_suffix(".new")
    fixing.write_text(good)
    os.replace(fixing, worker_recipe)
    fixed_at = time.monotonic()
    run.wait("worker unparked", lambda: "no longer parked" in run.pod_output(1), 60)
    unparked = time.monotonic() - fixed_at
    run.wait_ready(timeout=STARTUP)
    ready = time.monotonic() - fixed_at
    started = run.probe(0, "startupz")[1]["startup_seconds"]
    print(
        f"[{fixed_at - run.started:5.1f} s] recipe fixed; worker unparked {unparked:.1f} s later, "
        f"both pods ready {ready:.1f} s later; the leader started {started:.0f} s after launch "
        f"(start-up deadline {STARTUP} s + the time held)"
    )

    # Nothing was recreated: the same launchers, no exit, no peer declared lost, no deadline hit.
    assert [pod["pid"] for pod in run.pods()] == launchers
    assert [run.exit_code(0), run.exit_code(1)] == [None, None]
    assert started > STARTUP
    assert "group member no longer parked" in run.pod_output(0)
    assert "is gone" not in run.pod_output(0) and "start-up deadline" not in run.output()

    # The group deleted: SIGTERM to both pods at once, both exit 0 within the grace period (30 s); no
    # process, no /dev/shm segment of the host and no runtime file outside the pods' own directories is
    # left. (The render sidecar's part of a stop: tests/engines/test_run_vllm.py, SIGTERM.)
    tag = run.manifest()["tag"]
    stopped_at = time.time()
    assert run.stop() == 0, run.digest()
    for index in (0, 1):
        assert run.exit_code(index) == 0
        assert run.exited_at(index) - stopped_at < 30
    assert leftovers(tag) == []
    assert "left behind" not in run.output()
    assert set(os.listdir("/dev/shm")) == shm_before
