"""The capability watcher under `run` (healthchecks/capabilities.py), against the STAND-IN engine of
tests/standins/vllm, which follows vLLM 0.32.0: render endpoints 403 without --enable-scale-out, the
router's metric families, a NIXL side channel, a KV-event publisher and replay endpoint. Each
capability's absent and present case; a required one absent holds /readyz at 503 naming it, its probe
and the answer, records an Event and the metric, and never ends or restarts the pod."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.kube_api import EventsApi, serve_events_api
from tests.pods import STANDINS, LauncherPod
from tests.ports import free_port

LWS = {"LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_GROUP_SIZE": "1", "LWS_WORKER_INDEX": "0"}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[EventsApi]:
    yield from serve_events_api(tmp_path)


def capability_pod(tmp_path: Path, pool: str, env: dict[str, str] | None = None) -> LauncherPod:
    """A vLLM pool (`pool`: its YAML lines beyond kind and port) run over the stand-in engine."""
    model = tmp_path / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")
    port, kv, replay = free_port(), free_port(), free_port()
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"name: caps\nmodel: {{path: {model}, served_name: m}}\ndefault_pool: p\npools:\n  p:\n"
        f"    kind: vllm\n    port: {port}\n" + pool.replace("{kv}", str(kv)).replace("{replay}", str(replay))
    )
    base = {
        "LLMD_RECIPE_FILE": str(recipe),
        "POD_IP": "127.0.0.1",
        "LLMD_BIN_PATH": str(STANDINS),
        "LLMD_CHECK_INTERVAL": "0.2",
        "LLMD_CAPABILITY_SECONDS": "1",
        "LLMD_RESTART_BACKOFF_SECONDS": "0.05",
        "LLMD_DEREGISTER_SECONDS": "0",
    }
    return LauncherPod(tmp_path, {**base, **(env or {})}, port=port, ports={"kv": kv, "replay": replay})


def check_from_outside(pod: LauncherPod, *args: str) -> tuple[int, dict[str, Any]]:
    """`llm-d-launcher capabilities check` against the pod's engine: its exit code and JSON report."""
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "capabilities", "check", "--url", f"http://127.0.0.1:{pod.port}",
         "--format", "json", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout or "{}")


def capability_states(pod: LauncherPod) -> dict[tuple[str, str], str]:
    """(capability, target) -> the state whose sample is 1."""
    text = httpx.get(f"http://127.0.0.1:{pod.probe_port}/metrics", timeout=5).text
    return {
        (s.labels["capability"], s.labels["target"]): s.labels["state"]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "llmd_launcher_capability" and s.value == 1
    }


RENDER = "    capabilities: [api.render.completions]\n"


def test_render_absent_holds_readiness_names_the_403_and_records_an_event(
    tmp_path: Path, api: EventsApi
) -> None:
    pod = capability_pod(tmp_path, RENDER, {**LWS, **api.env()}).start()
    try:
        body = pod.wait_probe(
            "readyz", 503, timeout=30, until=lambda b: "api.render.completions" in str(b.get("failing"))
        )
        assert body["failing"]["capabilities"] == (
            "api.render.completions: POST /v1/completions/render returned 403"
        )
        assert pod.probe("livez")[0] == 200  # never a liveness verdict
        states = capability_states(pod)
        assert states[("api.render.completions", f"engine :{pod.port}")] == "absent"
        assert states[("metric.queue-depth", f"engine :{pod.port}")] == "present"
        deadline = time.monotonic() + 10
        while not api.seen and time.monotonic() < deadline:
            time.sleep(0.1)
        (seen,) = api.seen  # once, not every round
        assert seen.body["reason"] == "CapabilityAbsent"
        assert "api.render.completions absent" in seen.body["message"]
        assert "returned 403" in seen.body["message"]
        time.sleep(2.5)  # more rounds: still one Event, still not ready, never restarted
        assert len(api.seen) == 1 and pod.probe("readyz")[0] == 503
        assert "stand-in engine up" in pod.output() and pod.output().count("stand-in engine up") == 1
        code, report = check_from_outside(pod, "--require", "api.render.completions")
        assert code == 1 and report["runtime"].startswith("vllm")
        (row,) = report["capabilities"]
        assert row["result"] == "FAIL" and row["reason"] == "POST /v1/completions/render returned 403"
        assert row["required_by"] == "--require"
    finally:
        pod.signal(signal.SIGTERM)
        pod.finish()


def test_render_present_with_scale_out_is_ready(tmp_path: Path) -> None:
    pod = capability_pod(tmp_path, RENDER + "    args: {enable-scale-out: true}\n").start()
    try:
        body = pod.wait_probe("readyz", 200, timeout=30)
        assert body["checks"]["capabilities"] == {"ok": True, "detail": "every required capability present"}
        assert capability_states(pod)[("api.render.completions", f"engine :{pod.port}")] == "present"
        code, report = check_from_outside(
            pod, "--require", "api.render.completions", "--require", "metric.queue-depth"
        )
        assert code == 0 and [r["result"] for r in report["capabilities"]] == ["PASS", "PASS"]
    finally:
        pod.signal(signal.SIGTERM)
        pod.finish()


def test_a_renamed_metric_family_is_absent(tmp_path: Path) -> None:
    pod = capability_pod(tmp_path, "", {"STANDIN_ENGINE": "no-metric=vllm:kv_cache_usage_perc"}).start()
    try:
        body = pod.wait_probe("readyz", 503, timeout=30, until=lambda b: "metric." in str(b.get("failing")))
        assert body["failing"]["capabilities"] == (
            f"metric.kv-cache-utilization: GET /metrics on :{pod.port} has no vllm:kv_cache_usage_perc"
        )
    finally:
        pod.signal(signal.SIGTERM)
        pod.finish()


def test_context_fit_against_the_kv_pool_the_engine_reports(tmp_path: Path) -> None:
    """vllm:cache_config_info: 100 blocks of 16 tokens hold 1600 tokens, not one 2048-token request."""
    pool = "    args: {max-model-len: 2048}\n"
    small = capability_pod(tmp_path / "small", pool, {"STANDIN_ENGINE": "kv-blocks=100"}).start()
    big = capability_pod(tmp_path / "big", pool, {"STANDIN_ENGINE": "kv-blocks=128"}).start()
    try:
        body = small.wait_probe(
            "readyz", 503, timeout=30, until=lambda b: "kv-cache" in str(b.get("failing"))
        )
        assert body["failing"]["capabilities"] == (
            "kv-cache.context-fit: the KV pool holds 1600 tokens (vllm:cache_config_info num_gpu_blocks x "
            "block_size), less than one request of the recipe's context 2048"
        )
        big.wait_probe("readyz", 200, timeout=30)
    finally:
        for pod in (small, big):
            pod.signal(signal.SIGTERM)
            pod.finish()


def test_nixl_side_channel_absent_and_present(tmp_path: Path) -> None:
    nixl = (
        "    args: {kv-transfer-config: {kv_connector: NixlConnector, kv_role: kv_both}}\n"
        "    nixl: {side_channel_port: %d}\n"
        "    host: {advisory: [packages]}\n"  # the stand-in needs no nixl package
    )
    listening = capability_pod(tmp_path / "a", nixl % free_port()).start()
    silent = capability_pod(tmp_path / "b", nixl % free_port(), {"STANDIN_ENGINE": "no-side-channel"}).start()
    try:
        listening.wait_probe("readyz", 200, timeout=30)
        body = silent.wait_probe(
            "readyz", 503, timeout=30, until=lambda b: "kv-transfer" in str(b.get("failing"))
        )
        assert body["failing"]["capabilities"].startswith(
            "kv-transfer.side-channel-listening: connect 127.0.0.1:"
        )
        assert body["failing"]["capabilities"].endswith("Connection refused")
    finally:
        for pod in (listening, silent):
            pod.signal(signal.SIGTERM)
            pod.finish()


KV = "    kv_events: {port: {kv}, replay_port: {replay}}\n"


def test_kv_publisher_lost_after_ready_takes_the_pod_out_and_back_without_a_restart(tmp_path: Path) -> None:
    cue = tmp_path / "close-now"
    env = {"STANDIN_KV": f"until={cue},close=5", "LLMD_CHECK_TIMEOUT": "1"}
    pod = capability_pod(tmp_path, KV, env).start()
    try:
        pod.wait_probe("readyz", 200, timeout=30)
        states = capability_states(pod)
        assert states[("kv-events.publisher-reachable", f"rank 0 :{pod.ports['kv']}")] == "present"
        assert states[("kv-events.replay-reachable", f"rank 0 :{pod.ports['replay']}")] == "present"
        cue.touch()
        body = pod.wait_probe("readyz", 503, timeout=10, until=lambda b: "kv-events" in str(b.get("failing")))
        assert body["failing"]["capabilities"].startswith(
            f"kv-events.publisher-reachable: no ZMQ publisher completed a handshake at "
            f"tcp://127.0.0.1:{pod.ports['kv']}"
        )
        assert pod.probe("livez")[0] == 200
        pod.wait_probe("readyz", 200, timeout=15)  # the publisher is back: ready again
        assert pod.output().count("stand-in engine up") == 1  # never restarted
        assert "capability absent" in pod.output() and "capability present" in pod.output()
    finally:
        pod.signal(signal.SIGTERM)
        pod.finish()


def test_a_sidecar_restart_checks_again_at_once(tmp_path: Path) -> None:
    """The render sidecar, killed and restarted by the supervisor: its render capability is checked
    again when it answers, long before the cadence (600 s) would."""
    render = free_port()
    pool = f"    render: {{port: {render}}}\n    router: {{render_port: {render}}}\n"
    pod = capability_pod(tmp_path, pool, {"LLMD_CAPABILITY_SECONDS": "600"}).start()
    try:
        pod.wait_probe("readyz", 200, timeout=30)
        assert capability_states(pod)[("api.render.completions", f"render :{render}")] == "present"
        pod.children()["render"].kill()
        pod.wait_for("capabilities checked again after a process restart", timeout=20)
        pod.wait_probe("readyz", 200, timeout=10)
    finally:
        pod.signal(signal.SIGTERM)
        pod.finish()


def test_a_decode_pod_gates_on_its_own_side_channel_and_only_expects_the_peers(tmp_path: Path) -> None:
    """P/D: decode requires its own NIXL side channel and sidecar, and expects the prefill peer's side
    channel (LLMD_PD_CANARY_PREFILLER's host, the prefill pool's side-channel port): that one closed,
    decode stays ready and the metric names the peer."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")
    engine, supervisor, sidecar = free_port(span=2), free_port(), free_port(span=2)
    own, peer = free_port(span=2), free_port()  # nothing listens on the peer's
    nixl = "kv-transfer-config: {kv_connector: NixlConnector, kv_role: %s}"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"name: pd\nmodel: {{path: {model}}}\ndefault_pool: decode\npools:\n"
        f"  prefill:\n    kind: vllm\n    args: {{{nixl % 'kv_producer'}}}\n"
        f"    nixl: {{side_channel_port: {peer}}}\n"
        "  decode:\n    kind: vllm\n    layout: data-parallel\n    nodes: 1\n    data_parallel_local: 2\n"
        f"    port: {engine}\n    supervisor_port: {supervisor}\n    args: {{{nixl % 'kv_consumer'}}}\n"
        f"    nixl: {{side_channel_port: {own}}}\n    host: {{advisory: [packages]}}\n"
        f"    disagg_sidecar: {{port: {sidecar}, tls: false}}\n"
    )
    prefiller = f"127.0.0.1:{free_port()}"  # the prefill pod's API; its side channel: `peer`
    env = {"LLMD_RECIPE_FILE": str(recipe), "POD_IP": "127.0.0.1", "LLMD_BIN_PATH": str(STANDINS),
           "LLMD_CAPABILITY_SECONDS": "1", "LLMD_PD_CANARY_PREFILLER": prefiller}  # fmt: skip
    pod = LauncherPod(tmp_path, env, port=engine).start()
    try:
        body = pod.wait_probe("readyz", 200, timeout=30)
        assert body["checks"]["capabilities"]["ok"] is True
        states = capability_states(pod)
        assert states[("kv-transfer.side-channel-listening", f"rank 0 :{own} on 127.0.0.1")] == "present"
        assert states[("kv-transfer.side-channel-listening", f"rank 1 :{own + 1} on 127.0.0.1")] == "present"
        assert states[("disagg.sidecar-answering", f"rank 1 :{sidecar + 1}")] == "present"
        assert (
            states[("kv-transfer.peer-side-channel-reachable", f"peer prefill 127.0.0.1:{peer}")] == "absent"
        )
        time.sleep(2.5)
        assert pod.probe("readyz")[0] == 200  # still ready: the peer's path is the peer's to fix
        assert "capability absent" in pod.output() and "peer prefill" in pod.output()
    finally:
        pod.signal(signal.SIGTERM)
        pod.finish()
