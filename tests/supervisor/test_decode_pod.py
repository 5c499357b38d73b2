"""A decode pod's shape under `run`: the DP supervisor's ranks behind the disagg sidecar, with the
STAND-IN engine (tests/standins/vllm) and the STAND-IN Go sidecar
(tests/standins/llm-d-router-disagg-sidecar, which cannot run here)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.pods import STANDINS, LauncherPod, free_port


@pytest.fixture
def decode_pod(tmp_path: Path) -> Iterator[LauncherPod]:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    engine, supervisor, sidecar = free_port(), free_port(), free_port()
    while {engine + 1, sidecar + 1} & {supervisor, sidecar, engine}:  # rank 1 takes the next port
        engine, supervisor, sidecar = free_port(), free_port(), free_port()
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"name: standin-decode\nmodel: {{path: {model}}}\ndefault_pool: decode\npools:\n  decode:\n"
        "    kind: vllm\n    layout: data-parallel\n    nodes: 1\n    data_parallel_local: 2\n"
        f"    port: {engine}\n    supervisor_port: {supervisor}\n"
        f"    disagg_sidecar: {{port: {sidecar}, kv_connector: nixlv2, args: {{secure-proxy: false}}}}\n"
    )
    env = {
        "LLMD_RECIPE_FILE": str(recipe),
        "POD_IP": "127.0.0.1",
        "LLMD_BIN_PATH": str(STANDINS),
        "LLMD_RESTART_BACKOFF_SECONDS": "0.05",
        "STANDIN_SIDECAR": f"crash-first=1@{tmp_path / 'sidecar-starts'}",
    }
    pod = LauncherPod(tmp_path, env, port=engine, ports={"sidecar": sidecar, "supervisor": supervisor})
    try:
        yield pod.start()
    finally:
        pod.kill_everything()


def test_sidecar_ports_front_the_dp_ranks_and_everything_stops(decode_pod: LauncherPod) -> None:
    pod = decode_pod
    sidecar, engine = pod.ports["sidecar"], pod.port
    pod.wait_for(f"disagg-sidecar | stand-in sidecar {sidecar}..{sidecar + 1} -> {engine}..{engine + 1}")
    pod.wait_for("engine | stand-in engine up")
    started = [line for line in pod.output().splitlines() if "started" in line and "disagg-sidecar" in line]
    assert f"'--port={sidecar}'" in started[0] and f"'--model-server-port={engine}'" in started[0]
    assert "'--data-parallel-size=2'" in started[0] and "'--secure-proxy=false'" in started[0]
    assert "restarting sidecar" in pod.output()  # it crashed once at start and was restarted
    for rank in (0, 1):  # sidecar port + i reaches engine rank port + i
        reply = httpx.get(f"http://127.0.0.1:{sidecar + rank}/v1/models", timeout=10)
        assert reply.json() == {"port": engine + rank}
    assert httpx.get(f"http://127.0.0.1:{pod.ports['supervisor']}/readyz").status_code == 200
    pod.signal(signal.SIGTERM)
    assert pod.finish() == 0, pod.output()
    assert pod.leftovers() == []
