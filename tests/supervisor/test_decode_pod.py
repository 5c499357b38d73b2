"""A decode pod's shape under `run`: the DP supervisor's ranks behind the disagg sidecar, with the
STAND-IN engine (tests/standins/vllm) and the STAND-IN Go sidecar
(tests/standins/llm-d-router-disagg-sidecar, which cannot run here)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.pods import STANDINS, LauncherPod
from tests.ports import free_port


@pytest.fixture
def decode_pod(tmp_path: Path) -> Iterator[LauncherPod]:
    pod = _decode_pod(tmp_path, {"STANDIN_SIDECAR": f"crash-first=1@{tmp_path / 'sidecar-starts'}"})
    try:
        yield pod.start()
    finally:
        pod.kill_everything()


def _decode_pod(
    tmp_path: Path, env: dict[str, str], sidecar_fields: str = "args: {secure-proxy: false}"
) -> LauncherPod:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")
    engine, supervisor, sidecar = free_port(span=2), free_port(), free_port(span=2)  # rank 1: the next port
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"name: standin-decode\nmodel: {{path: {model}}}\ndefault_pool: decode\npools:\n  decode:\n"
        "    kind: vllm\n    layout: data-parallel\n    nodes: 1\n    data_parallel_local: 2\n"
        f"    port: {engine}\n    supervisor_port: {supervisor}\n"
        f"    disagg_sidecar: {{{', '.join(filter(None, (f'port: {sidecar}', sidecar_fields)))}}}\n"
    )
    base = {
        "LLMD_RECIPE_FILE": str(recipe),
        "POD_IP": "127.0.0.1",
        "LLMD_BIN_PATH": str(STANDINS),
        "LLMD_RESTART_BACKOFF_SECONDS": "0.05",
    }
    ports = {"sidecar": sidecar, "supervisor": supervisor}
    return LauncherPod(tmp_path, {**base, **env}, port=engine, ports=ports)


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


def test_sidecar_down_makes_the_pod_not_ready_naming_the_sidecar(tmp_path: Path) -> None:
    """The disagg sidecar dies (SIGKILL): /readyz turns 503 naming it while the launcher waits to
    restart it; the pod stays live (a sidecar is restarted, not fatal); ready again once it is back."""
    env = {"LLMD_RESTART_BACKOFF_SECONDS": "3", "LLMD_CHECK_INTERVAL": "0.1"}
    pod = _decode_pod(tmp_path, env).start()
    try:
        ready = pod.wait_probe("readyz", 200)
        assert set(ready["checks"]) == {"engine", "disagg-sidecar", "capabilities"}
        assert f"GET :{pod.ports['supervisor']}/readyz: 200" in ready["checks"]["engine"]["detail"]
        children = psutil.Process(pod.pid).children()
        sidecar = next(p for p in children if p.cmdline()[1].endswith("llm-d-router-disagg-sidecar"))
        sidecar.kill()
        body = pod.wait_probe("readyz", 503, timeout=2)
        assert list(body["failing"]) == ["disagg-sidecar"]
        assert "not running" in body["failing"]["disagg-sidecar"]
        assert body["checks"]["engine"]["ok"] is True
        assert pod.probe("livez")[0] == 200
        pod.wait_probe("readyz", 200, timeout=10)  # restarted after its 3 s backoff
        pod.signal(signal.SIGTERM)
        assert pod.finish() == 0, pod.output()
        assert pod.leftovers() == []
    finally:
        pod.kill_everything()


@pytest.mark.parametrize(("fields", "scheme"), [("", "http"), ("tls: true", "https")])
def test_the_sidecars_tls_and_the_launchers_check_agree(tmp_path: Path, fields: str, scheme: str) -> None:
    """A recipe that says nothing of the sidecar's TLS (upstream serves TLS by default): the launcher
    passes --secure-proxy from disagg_sidecar.tls and checks the sidecar the same way, so the pod
    becomes ready either way (it never did before: the sidecar served TLS to a plain-HTTP check)."""
    pod = _decode_pod(tmp_path, {"LLMD_CHECK_INTERVAL": "0.1"}, fields).start()
    try:
        ready = pod.wait_probe("readyz", 200, timeout=30)
        sidecar = pod.ports["sidecar"]
        tls = scheme == "https"
        how = f"connect 127.0.0.1:{sidecar}: reachable" if tls else f"GET :{sidecar}/health: 200"
        assert how in ready["checks"]["disagg-sidecar"]["detail"]
        reply = httpx.get(f"{scheme}://127.0.0.1:{sidecar}/v1/models", timeout=10, verify=False)
        assert reply.json() == {"port": pod.port}
        pod.signal(signal.SIGTERM)
        assert pod.finish() == 0, pod.output()
    finally:
        pod.kill_everything()
