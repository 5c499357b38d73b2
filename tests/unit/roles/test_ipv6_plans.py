"""Every address the plans build, with IPv6 pod IPs: bare literals where the engine takes a host,
brackets where it takes host:port, and KV events relayed (vLLM binds tcp://*:N IPv4-only)."""

from __future__ import annotations

import json
from typing import Any

from launcher.contract.addresses import host_port

LEADER, POD = "fd00::1", "fd00::7"


def lws(pool: str, size: int, index: int) -> dict[str, str]:
    return {
        "LLMD_RECIPE": "kimi-k3.1-pro",
        "LLMD_POOL": pool,
        "LWS_LEADER_ADDRESS": LEADER,
        "LWS_GROUP_SIZE": str(size),
        "LWS_WORKER_INDEX": str(index),
        "POD_IP": POD,
    }


def after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_prefill_addresses(plan_json: Any) -> None:
    plan = plan_json(env=lws("prefill", 2, 0))
    engine = plan["processes"][0]
    assert after(engine["argv"], "--master-addr") == LEADER  # vLLM brackets it itself (get_tcp_uri)
    assert engine["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == POD
    assert engine["env"]["VLLM_HOST_IP"] == POD
    config = json.loads(after(engine["argv"], "--kv-events-config"))
    assert config["topic"] == f"kv@[{POD}]:8000@moonshotai/Kimi-K3.1-Pro"
    # The engine publishes on ipc:// (each DP rank its own socket); the launcher relays on TCP.
    assert config["endpoint"].startswith("ipc://") and config["endpoint"].endswith(".tcp:5557")
    assert config["replay_endpoint"].startswith("ipc://") and config["replay_endpoint"].endswith(".tcp:5567")
    (source,) = plan["kv_events"]["sources"]
    assert source["port"] == 5557 and source["ipc"] == config["endpoint"]


def test_decode_data_parallel_address_and_per_rank_ipc(plan_json: Any) -> None:
    plan = plan_json(env=lws("decode", 4, 1))
    engine = plan["processes"][0]
    assert after(engine["argv"], "--data-parallel-address") == LEADER
    assert engine["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == POD


def test_decode_with_kv_events_gets_one_ipc_socket_per_rank(plan_json: Any, tmp_path: Any) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: dp\nmodel: {path: /m}\ndefault_pool: d\npools:\n  d:\n    kind: vllm\n"
        "    layout: data-parallel\n"
        "    nodes: 2\n    data_parallel_local: 2\n    supervisor_port: 8208\n    dp_rpc_port: 5555\n"
        "    kv_events: {port: 5557, replay_port: 5567}\n"
    )
    env = {**lws("d", 2, 1), "LLMD_RECIPE_FILE": str(recipe)}
    del env["LLMD_RECIPE"]
    plan = plan_json(env=env)
    config = json.loads(after(plan["processes"][0]["argv"], "--kv-events-config"))
    # Ranks 2, 3 on this pod: base 5555 + global rank (vLLM offset_endpoint_port) = 5557, 5558.
    assert config["endpoint"].endswith(".tcp:5555")
    assert [s["ipc"].rsplit(":", 1)[1] for s in plan["kv_events"]["sources"]] == ["5557", "5558"]


def test_sglang_dist_init_addr_is_bracketed(plan_json: Any) -> None:
    plan = plan_json(env={**lws("tpu", 4, 2), "TPU_WORKER_ID": "2"})
    engine = plan["processes"][0]
    assert after(engine["argv"], "--dist-init-addr") == f"[{LEADER}]:20000"
    assert engine["env"]["SGLANG_HOST_IP"] == POD


def test_mooncake_donor_host_is_the_bare_ipv6(plan_json: Any) -> None:
    plan = plan_json(env={"LLMD_RECIPE": "kimi-k3.1-pro", "LLMD_POOL": "mooncake-donor", "POD_IP": POD})
    assert f"--host={POD}" in plan["processes"][0]["argv"]


def test_ipv4_pods_keep_tcp_endpoints(plan_json: Any) -> None:
    env = {**lws("prefill", 2, 0), "POD_IP": "10.0.0.7", "LWS_LEADER_ADDRESS": "10.0.0.1"}
    plan = plan_json(env=env)
    config = json.loads(after(plan["processes"][0]["argv"], "--kv-events-config"))
    assert config["endpoint"] == "tcp://*:5557" and plan["kv_events"]["sources"][0]["ipc"] is None


def test_host_port_brackets_only_ipv6_literals() -> None:
    assert host_port(POD, 1) == f"[{POD}]:1"
    assert host_port("10.0.0.1", 1) == "10.0.0.1:1"
    assert host_port("leader.svc", 1) == "leader.svc:1"


def test_an_ipc_path_longer_than_a_unix_socket_takes_is_refused(run_cli: Any) -> None:
    """sockaddr_un holds 107 bytes of path (libzmq ipc_address.cpp: ENAMETOOLONG at bind): a long
    LLMD_RUNTIME_DIR made the engine's publisher fail after the model loaded (issue #24 item 14)."""
    env = lws("prefill", 2, 0)
    fits = "/r/" + "d" * (107 - len("/r//kv-replay.tcp:5567"))
    code, out, err = run_cli("plan", "--format", "json", env={**env, "LLMD_RUNTIME_DIR": fits})
    assert code == 0, err
    longest = json.loads(after(json.loads(out)["processes"][0]["argv"], "--kv-events-config"))
    assert len(longest["replay_endpoint"].removeprefix("ipc://")) == 107
    code, _, err = run_cli("plan", env={**env, "LLMD_RUNTIME_DIR": fits + "d"})
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith("llm-d-launcher: error: LLMD_RUNTIME_DIR: ") and "108 bytes" in line, line
    ipv4 = {**env, "POD_IP": "10.0.0.7", "LWS_LEADER_ADDRESS": "10.0.0.1", "LLMD_RUNTIME_DIR": fits + "d"}
    assert run_cli("plan", env=ipv4)[0] == 0  # TCP publishers: no socket path at all
