"""The guide's TPU shape for real, on CPU: one SGLang 0.5.23 engine with TP=2 across two pods (node-rank 0
serves the API, node-rank 1 only computes) over gloo, each pod `llm-d-launcher run` in its own
namespaces. Real: SGLang and its whole dependency tree (venv sglang-full), torch's gloo, the launcher.
STAND-IN: `sgl_kernel` (no CPU build; never called on a CPU without AMX), tests/standins/sgl_kernel.

What SGLang does that the launcher must cope with (SGLang 0.5.23 sglang/srt/entrypoints/engine.py):
- the non-leader serves a dummy HTTP server on its own --host:--port (static 200 for /health) that says
  nothing about the group: its probes must follow the leader instead;
- the non-leader ignores SIGTERM ("waiting for the rank-0 ShutdownReq broadcast"): the launcher's
  SIGKILL within the grace budget is what ends it when only its pod stops.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.engines.engine_venvs import VENVS
from tests.group.conftest import leftovers, tpu_recipe

pytestmark = pytest.mark.group

GRACE = 10  # LLMD_GRACE_SECONDS in these tests
PEER_LOST = 5  # LLMD_PEER_LOST_SECONDS
CHECK_INTERVAL = 2  # LLMD_CHECK_INTERVAL default
SLACK = 10  # a loaded 2-core machine
LEADER_IP = "10.77.0.10"


def _start(start_group: Any, tp2_model: Path, tmp_path: Path) -> Any:
    recipe = tpu_recipe(tmp_path / "recipe.yaml", tp2_model)
    run = start_group(
        recipe,
        # One core per "host": SGLang binds each local rank's OpenMP threads (numa_utils.py
        # init_threads_binding); on two real hosts each has its own, here they would share core 0.
        "--pod-env",
        "0:SGLANG_CPU_OMP_THREADS_BIND=0",
        "--pod-env",
        "1:SGLANG_CPU_OMP_THREADS_BIND=1",
        env={
            "LLMD_BIN_PATH": str(VENVS / "sglang-full" / "bin"),
            "LLMD_GRACE_SECONDS": str(GRACE),
            "LLMD_PEER_LOST_SECONDS": str(PEER_LOST),
        },
    )
    took = run.wait_ready(timeout=300)
    print(f"TPU group ready {took:.0f} s after the runner started")
    return run


def _engine(run: Any, index: int) -> psutil.Process:
    launcher: psutil.Process = run.launcher(index)
    for child in launcher.children():
        if "sglang.launch_server" in child.cmdline():
            return child
    raise AssertionError(f"pod {index} has no SGLang engine")


def _inside(run: Any, index: int, url: str) -> tuple[int | None, str]:
    """GET url from inside pod `index`'s network namespace (SGLang's non-leader binds its loopback)."""
    pid = run.pods()[index]["pid"]
    result = subprocess.run(
        ["nsenter", f"--net=/proc/{pid}/ns/net", "curl", "-s", "-m", "2", "-w", "\n%{http_code}", url],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip
    body, _, code = result.stdout.rpartition("\n")
    return (int(code) if code.isdigit() and code != "000" else None), body


def _tree(run: Any, index: int) -> list[psutil.Process]:
    engine = _engine(run, index)
    return [engine, *engine.children(recursive=True)]


def test_tpu_group_serves_and_ends_when_the_leader_dies(
    start_group: Any, tp2_model: Path, tmp_path: Path
) -> None:
    run = _start(start_group, tp2_model, tmp_path)
    reply = httpx.post(
        f"http://{LEADER_IP}:30000/v1/completions",
        json={"model": "tiny", "prompt": "one two three four", "max_tokens": 4},
        timeout=60,
    )
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 4, reply.text

    # The non-leader's own port answers 200 and says nothing about the group; its probes do not ask it:
    # they follow the leader's API port, which opens only once the whole group has loaded.
    status, body = _inside(run, 1, "http://127.0.0.1:30000/health")
    assert status == 200, body
    status, ready = run.probe(1, "readyz")
    assert status == 200 and set(ready["checks"]) == {"engine", "leader"}
    assert f"{LEADER_IP}:30000" in ready["checks"]["leader"]["detail"]

    # The leader's engine dies: what the worker's probes and its own port say, until its pod ends.
    tag = run.manifest()["tag"]
    killed_at = time.time()
    _engine(run, 0).send_signal(signal.SIGKILL)
    timeline: list[tuple[float, int | None, int | None]] = []
    while run.exit_code(1) is None and time.time() - killed_at < PEER_LOST + 2 * GRACE + SLACK:
        timeline.append(
            (
                time.time() - killed_at,
                run.probe(1, "readyz")[0],
                _inside(run, 1, "http://127.0.0.1:30000/health")[0],
            )
        )
        time.sleep(0.2)
    print("after the leader's engine died: (s, worker /readyz, worker's own /health)", timeline)
    run.wait("both pods ended", lambda: run.exit_code(0) is not None and run.exit_code(1) is not None, 30)
    print(
        f"leader pod ended {run.exited_at(0) - killed_at:.1f} s, "
        f"worker pod {run.exited_at(1) - killed_at:.1f} s after the leader's engine died; "
        f"exit codes {run.exit_code(0)}, {run.exit_code(1)}: "
        f"{run.termination(1)[:200]!r}"
    )
    # SGLang's non-leader SIGKILLs its own tree when its scheduler fails (kill_process_tree): 137 too,
    # unless the launcher's peer watch is first (4).
    assert run.exit_code(0) == 137 and run.exit_code(1) in (137, 3, 4)
    assert run.exited_at(1) - killed_at <= PEER_LOST + GRACE + SLACK
    # Not ready once a check has run since the leader went (readiness answers from checks at most one
    # LLMD_CHECK_INTERVAL old), whatever the worker's own port said; or the pod has already ended.
    assert all(ready != 200 for t, ready, _ in timeline if t > CHECK_INTERVAL + 1)
    run.proc.wait(timeout=30)
    assert leftovers(tag) == []
    assert "left behind" not in run.output()


def test_tpu_worker_pod_stop_kills_what_ignores_sigterm_and_ends_the_group(
    start_group: Any, tp2_model: Path, tmp_path: Path
) -> None:
    run = _start(start_group, tp2_model, tmp_path)
    tag = run.manifest()["tag"]
    worker_tree = _tree(run, 1)
    stopped_at = time.time()
    run.launcher(1).send_signal(signal.SIGTERM)  # this pod only, as the kubelet deleting it
    time.sleep(3)
    assert _engine(run, 1).is_running()  # SGLang's non-leader waits for rank 0's ShutdownReq
    run.wait("the worker pod ended", lambda: run.exit_code(1) is not None, GRACE + SLACK)
    took = run.exited_at(1) - stopped_at
    print(f"worker pod stopped {took:.1f} s after SIGTERM (grace {GRACE} s), exit {run.exit_code(1)}")
    assert took <= GRACE + 2
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in worker_tree)
    # A member is gone: the leader's engine fails at once, or its launcher's peer watch ends the pod.
    run.wait("the leader pod ended", lambda: run.exit_code(0) is not None, PEER_LOST + GRACE + SLACK)
    after = run.exited_at(0) - run.exited_at(1)
    print(
        f"leader pod ended {after:.1f} s after the worker pod, exit {run.exit_code(0)}: "
        f"{run.termination(0)[:200]!r}"
    )
    assert run.exit_code(0) in (137, 3, 4) and after <= PEER_LOST + GRACE + SLACK
    run.proc.wait(timeout=30)
    assert leftovers(tag) == []
    assert "left behind" not in run.output()


def test_tpu_group_stop_ends_every_pod_within_the_grace_budget(
    start_group: Any, tp2_model: Path, tmp_path: Path
) -> None:
    """A group deletion: SIGTERM to both pods at once. The non-leader ignores its own SIGTERM; rank 0's
    shutdown (or the launcher's SIGKILL at its deadline) ends it, within the grace budget."""
    run = _start(start_group, tp2_model, tmp_path)
    tag = run.manifest()["tag"]
    stopped_at = time.monotonic()
    code = run.stop(timeout=GRACE + 10 + SLACK)  # the runner's own SIGKILL comes at grace + 10 s
    took = time.monotonic() - stopped_at
    print(f"group stopped {took:.1f} s after SIGINT, exit codes {run.exit_code(0)}, {run.exit_code(1)}")
    assert code == 0 and took <= GRACE + 2
    assert "SIGKILL" not in run.output()  # the runner's backstop was not needed
    assert leftovers(tag) == []
    assert "left behind" not in run.output()
