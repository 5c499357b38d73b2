"""Golden plans: every role of the Kimi-K3.1-Pro guide, argv + env + files checked exactly.

The expected values are written out from the llm-d guide (excerpt: tests/fixtures/kimi-k3.1-pro-guide.md),
not generated; test_the_guides_flags_are_planned checks the plans against that excerpt itself.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

MODEL = "/models/Kimi-K3.1-Pro"
SERVED = "moonshotai/Kimi-K3.1-Pro"
PREFILL_LEADER = "kimi-k3-1-gpu-vllm-prefill-0.kimi-k3-1-gpu-vllm-prefill.llm-d-kimi-k3-1"
DECODE_LEADER = "kimi-k3-1-gpu-vllm-decode-0.kimi-k3-1-gpu-vllm-decode.llm-d-kimi-k3-1"
TPU_LEADER = "kimi-k3-1-tpu-sglang-0.kimi-k3-1-tpu-sglang.llm-d-kimi-k3-1"
DSPARK = {
    "model": "Inferact/Kimi-K3.1-Pro-DSpark-preview",
    "num_speculative_tokens": 5,
    "method": "dspark",
    "draft_sample_method": "probabilistic",
}
STORE_FILE = "/tmp/llm-d-launcher/mooncake-store.json"
STORE = {
    "master_server_address": "mooncake-master:8700",
    "metadata_server": "http://mooncake-master:8080/metadata",
    "protocol": "rdma",
    "device_name": "",
    "global_segment_size": "160GB",
}
HF_ENV = {"HF_HUB_CACHE": "/models/hf-cache/hub", "HF_HUB_OFFLINE": "1"}


def network_env(pod_ip: str, host_ip_var: str = "VLLM_HOST_IP") -> dict[str, str]:
    """The interface that holds POD_IP is found in the pod (preflight); the dry-run shows its placeholder."""
    return {"GLOO_SOCKET_IFNAME": IFNAME, "NCCL_SOCKET_IFNAME": IFNAME, host_ip_var: pod_ip}


IFNAME = "$(LLMD_POD_IFNAME)"


def j(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def multi_connector(role: str, nixl: str, store: str) -> str:
    """The guide's MultiConnector: NIXL for P->D transfer plus the shared MooncakeStore."""
    return j({
        "kv_connector": "MultiConnector",
        "kv_role": role,
        "kv_connector_extra_config": {"connectors": [
            {"kv_connector": "NixlConnector", "kv_role": nixl},
            {"kv_connector": "MooncakeStoreConnector", "kv_role": store},
        ]},
    })  # fmt: skip


PREFILL_FLAGS = [
    "--tensor-parallel-size", "8",
    "--shutdown-timeout", "12",  # LLMD_GRACE_SECONDS 30 - LLMD_DEREGISTER_SECONDS 5 (ShutdownBudget)
    "--enable-expert-parallel",
    "--enable-ep-weight-filter",
    "--enable-cumem-allocator",
    "--enable-prefix-caching",
    "--load-format", "fastsafetensors",
    "--gpu-memory-utilization", "0.95",
    "--kv-cache-dtype", "nvfp4_ds_mla",
    "--language-model-only",
    "--max-num-seqs", "32",
    "--reasoning-parser", "kimi_k3", "--tool-call-parser", "kimi_k3", "--enable-auto-tool-choice",
    "--speculative-config", j(DSPARK),
    "--kv-transfer-config", multi_connector("kv_both", nixl="kv_producer", store="kv_both"),
]  # fmt: skip


def prefill_argv(node_rank: int, pod_ip: str) -> list[str]:
    return [
        "vllm", "serve", MODEL, "--served-model-name", SERVED, "--port", "8000",
        "--nnodes", "2", "--node-rank", str(node_rank), "--master-addr", PREFILL_LEADER,
        *(["--headless"] if node_rank else []),
        *PREFILL_FLAGS[:4],
        # what the launcher's checks poll (/health, the watcher's /metrics), on the serving node only
        *([] if node_rank else ["--disable-access-log-for-endpoints", "/health,/metrics"]),
        *PREFILL_FLAGS[4:],
        "--kv-events-config", j({
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": "tcp://*:5557",
            "topic": f"kv@{pod_ip}:8000@{SERVED}",
            "replay_endpoint": "tcp://*:5567",
        }),
    ]  # fmt: skip


def prefill_env(pod_ip: str) -> dict[str, str]:
    return {
        "VLLM_ENGINE_READY_TIMEOUT_S": "2700",  # raised to LLMD_STARTUP_SECONDS
        **HF_ENV,
        "PYTHONHASHSEED": "42",
        "VLLM_NIXL_SIDE_CHANNEL_HOST": pod_ip,
        "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600",
        "MOONCAKE_CONFIG_PATH": STORE_FILE,
        **network_env(pod_ip),
    }


def lws(leader: str, size: int, index: int, pod_ip: str, pool: str) -> dict[str, str]:
    return {
        "LWS_LEADER_ADDRESS": leader,
        "LWS_GROUP_SIZE": str(size),
        "LWS_WORKER_INDEX": str(index),
        "POD_IP": pod_ip,
        "LLMD_POOL": pool,
    }


def processes(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in plan["processes"]}


def test_prefill_leader(plan_json: Any) -> None:
    plan = plan_json(env=lws(PREFILL_LEADER, 2, 0, "10.64.1.10", "prefill"))
    assert plan["role"]["name"] == "prefill-leader"
    assert plan["placeholders"] == []
    procs = processes(plan)
    assert list(procs) == ["engine", "render"]
    engine, render = procs["engine"], procs["render"]
    assert engine["argv"] == prefill_argv(0, "10.64.1.10")
    assert engine["env"] == prefill_env("10.64.1.10")
    assert engine["critical"] is True
    assert [(p["port"], p["name"]) for p in engine["ports"]] == [
        (8000, "http"), (29501, "torch-dist"), (5557, "kv-events-rank0"), (5567, "kv-replay-rank0"),
        (5600, "nixl-rank0"),
    ]  # fmt: skip
    assert engine["health"] == {"port": 8000, "path": "/health"}
    # The launcher watches the leader's publisher (the headless node runs no scheduler).
    assert plan["kv_events"] == {
        "sources": [
            {"rank": 0, "port": 5557, "replay_port": 5567, "api_port": 8000, "ipc": None, "replay_ipc": None}
        ],
        "silence_seconds": 60.0,
        "readiness": False,
        "block_size": 2048,  # the router's blockSizeTokens, compared with the events' block_size
        "block_size_readiness": False,
        # What its KV peers must share, exported as a metric: no --block-size (vLLM's default), the
        # seed as sha256("42")[:12].
        "identity": {"model": MODEL, "block_size": None, "hash_seed": "73475cb40a56"},
    }
    assert render["argv"] == [
        "vllm",
        "launch",
        "render",
        MODEL,
        "--served-model-name",
        SERVED,
        "--port",
        "8089",
    ]
    assert render["critical"] is False
    assert render["health"] == {"port": 8089, "path": "/health"}
    assert plan["files"] == [
        {"path": STORE_FILE, "mode": "0644", "content": json.dumps(STORE, indent=2) + "\n"}
    ]


def test_prefill_worker(plan_json: Any) -> None:
    plan = plan_json(env=lws(PREFILL_LEADER, 2, 1, "10.64.1.11", "prefill"))
    assert plan["role"]["name"] == "prefill-worker"
    (engine,) = plan["processes"]  # no render sidecar on the headless node
    assert engine["argv"] == prefill_argv(1, "10.64.1.11")
    assert engine["env"] == prefill_env("10.64.1.11")
    assert engine["ports"] == [] and engine["health"] is None  # no API server
    assert plan["kv_events"] is None  # no scheduler: nothing published here
    assert [f["path"] for f in plan["files"]] == [STORE_FILE]  # its workers run the store connector too


@pytest.mark.parametrize("index", range(4))
def test_decode(plan_json: Any, index: int) -> None:
    pod_ip = f"10.64.2.{20 + index}"
    plan = plan_json(env=lws(DECODE_LEADER, 4, index, pod_ip, "decode"))
    assert plan["role"]["name"] == "decode"
    assert plan["role"]["dp_ranks"] == {"start": 4 * index, "stop": 4 * index + 4, "size": 16}
    procs = processes(plan)
    assert list(procs) == ["engine", "disagg-sidecar"]
    assert procs["engine"]["argv"] == [
        "vllm", "serve", MODEL, "--served-model-name", SERVED, "--port", "8200",
        "--data-parallel-size", "16", "--data-parallel-size-local", "4",
        "--data-parallel-start-rank", str(4 * index),
        "--data-parallel-address", DECODE_LEADER, "--data-parallel-rpc-port", "5555",
        "--data-parallel-multi-port-external-lb", "--data-parallel-supervisor-port", "8208",
        "--shutdown-timeout", "12",
        "--disable-access-log-for-endpoints", "/health,/readyz",  # DP supervisor; no kv_events
        "--enable-expert-parallel", "--enable-ep-weight-filter", "--enable-cumem-allocator",
        "--load-format", "fastsafetensors", "--gpu-memory-utilization", "0.95",
        "--kv-cache-dtype", "nvfp4_ds_mla", "--max-num-seqs", "32",
        "--max-num-batched-tokens", "512", "--max-cudagraph-capture-size", "512",
        "--no-enable-prefix-caching", "--use-replayssm",
        "--reasoning-parser", "kimi_k3", "--tool-call-parser", "kimi_k3", "--enable-auto-tool-choice",
        "--quantization-config", j({"linear": "mxfp8", "moe": "mxfp8"}),
        "--speculative-config", j(DSPARK),
        "--kv-transfer-config", multi_connector("kv_consumer", nixl="kv_consumer", store="kv_consumer"),
    ]  # fmt: skip
    assert procs["engine"]["env"] == {
        "VLLM_ENGINE_READY_TIMEOUT_S": "2700",
        **HF_ENV,
        "PYTHONHASHSEED": "42",  # MooncakeStore keys must hash like prefill's
        "VLLM_NIXL_SIDE_CHANNEL_HOST": pod_ip,
        "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600",
        "MOONCAKE_CONFIG_PATH": STORE_FILE,
        **network_env(pod_ip),
    }
    engine_ports = {p["port"] for p in procs["engine"]["ports"]}
    assert {8200, 8201, 8202, 8203, 8208} <= engine_ports
    assert {5600 + r for r in range(4 * index, 4 * index + 4)} <= engine_ports  # NIXL 5600 + global rank
    assert (5555 in engine_ports) == (index == 0)  # the DP RPC port listens on the leader only
    assert procs["engine"]["health"] == {"port": 8208, "path": "/readyz"}
    assert procs["disagg-sidecar"]["argv"] == [
        "llm-d-router-disagg-sidecar", "--port=8000", "--model-server-port=8200",
        "--data-parallel-size=4", "--kv-connector=nixlv2", "--secure-proxy=false",
    ]  # fmt: skip
    assert [p["port"] for p in procs["disagg-sidecar"]["ports"]] == [8000, 8001, 8002, 8003]
    assert plan["files"][0]["content"] == json.dumps(STORE, indent=2) + "\n"


@pytest.mark.parametrize("index", range(4))
def test_tpu(plan_json: Any, index: int) -> None:
    plan = plan_json(
        env={**lws(TPU_LEADER, 4, index, f"10.64.3.{index}", "tpu"), "TPU_WORKER_ID": str(index)}
    )
    assert plan["role"]["name"] == ("tpu-leader" if index == 0 else "tpu-worker")
    (engine,) = plan["processes"]
    api = ["--host", "0.0.0.0", "--port", "30000", "--enable-metrics"] if index == 0 else []
    assert engine["argv"] == [
        "python3", "-m", "sglang.launch_server",
        "--model-path", MODEL, "--served-model-name", SERVED, "--tp-size", "32",
        "--nnodes", "4", "--node-rank", str(index), "--dist-init-addr", f"{TPU_LEADER}:20000",
        *api,
        "--ep-size", "8", "--context-length", "491520", "--page-size", "128",
        "--kv-cache-dtype", "fp8_e4m3", "--enable-hierarchical-cache", "--hicache-ratio", "2",
        "--grammar-backend", "none", "--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3",
    ]  # fmt: skip
    assert engine["env"] == {**HF_ENV, **network_env(f"10.64.3.{index}", "SGLANG_HOST_IP")}
    assert engine["health"] == ({"port": 30000, "path": "/health"} if index == 0 else None)
    assert plan["files"] == []


def test_mooncake_master(plan_json: Any) -> None:
    plan = plan_json(env={"LLMD_POOL": "mooncake-master"})
    assert plan["role"]["name"] == "mooncake-master"
    assert plan["placeholders"] == []  # the master needs no pod IP: nothing to fill in
    (master,) = plan["processes"]
    assert master["argv"] == [
        "mooncake_master", "--port=8700", "--enable_http_metadata_server=true",
        "--http_metadata_server_port=8080", "--rpc_thread_num=32", "--metrics_port=9003",
    ]  # fmt: skip
    assert master["env"] == {}
    assert master["health"] == {"port": 9003, "path": "/health"}
    assert sorted(p["port"] for p in master["ports"]) == [8080, 8700, 9003]


def test_mooncake_donor(plan_json: Any) -> None:
    plan = plan_json(env={"LLMD_POOL": "mooncake-donor", "POD_IP": "10.64.5.7"})
    assert plan["role"]["name"] == "mooncake-donor"
    (donor,) = plan["processes"]
    assert donor["argv"] == [
        "mooncake_client", "--host=10.64.5.7", "--port=50052",
        "--master_server_address=mooncake-master:8700",
        "--metadata_server=http://mooncake-master:8080/metadata",
        "--protocol=rdma", "--device_names=", "--global_segment_size=500GB",
        "--enable_http_server=true", "--http_port=9300",
    ]  # fmt: skip
    assert donor["health"] == {"port": 9300, "path": "/health"}


# The guide itself: its backticked flags, read from the excerpt, must be in the plans.
GUIDE = Path(__file__).resolve().parents[2] / "fixtures" / "kimi-k3.1-pro-guide.md"


def guide_line(start: str) -> str:
    """The one line of the guide excerpt that starts with `start`."""
    (line,) = [line for line in GUIDE.read_text().splitlines() if line.startswith(start)]
    return line


def guide_values(pattern: str, line: str) -> tuple[str, ...]:
    found = re.search(pattern, line)
    assert found, (pattern, line)
    return found.groups()


def guide_fragments(line: str) -> list[list[str]]:
    """The backticked command fragments of a guide line that hold flags, split as a shell would."""
    return [shlex.split(span) for span in line.split("`")[1::2] if "--" in span]


def same(planned: str, written: str) -> bool:
    """Equal values; JSON compared as data, so spacing and quoting do not matter."""
    if written.startswith("{") and planned.startswith("{"):
        return bool(json.loads(planned) == json.loads(written))
    return planned == written


def runs(fragment: list[str], argv: list[str]) -> bool:
    """argv does what the guide's fragment says: a leading program name is argv[0]; `--flag value`
    and `--flag=value` are a pair in argv (either spelling); a bare flag appears as given."""
    words = list(fragment)
    if words and not words[0].startswith("--") and argv[0] != words.pop(0):
        return False
    pairs = list(itertools.pairwise(argv))
    while words:
        flag = words.pop(0)
        if "=" in flag:
            flag, value = flag.split("=", 1)
        elif words and not words[0].startswith("--"):
            value = words.pop(0)
        elif flag in argv:
            continue
        else:
            return False
        if f"{flag}={value}" not in argv and not any(a == flag and same(b, value) for a, b in pairs):
            return False
    return True


TPU_LEADER_ENV = {**lws(TPU_LEADER, 4, 0, "10.64.3.0", "tpu"), "TPU_WORKER_ID": "0"}
GUIDE_ROWS = [
    ("`prefill-lws.yaml`", lws(PREFILL_LEADER, 2, 0, "10.64.1.10", "prefill")),
    ("`decode-lws.yaml`", lws(DECODE_LEADER, 4, 0, "10.64.2.20", "decode")),
    ("`mooncake.yaml`", {"LLMD_POOL": "mooncake-master"}),
    ("`modelserver/gpu/vllm/gke/`", {"LLMD_POOL": "mooncake-donor", "POD_IP": "10.64.5.7"}),
    ("KV cache\t", TPU_LEADER_ENV),
]


@pytest.mark.parametrize(("row", "env"), GUIDE_ROWS, ids=[row.strip("`\t") for row, _ in GUIDE_ROWS])
def test_the_guides_flags_are_planned(plan_json: Any, row: str, env: dict[str, str]) -> None:
    fragments = guide_fragments(guide_line(row))
    assert fragments, row
    argvs = [p["argv"] for p in plan_json(env=env)["processes"]]
    missing = [f for f in fragments if not any(runs(f, argv) for argv in argvs)]
    assert missing == []


def test_the_guides_tpu_prose_is_planned(plan_json: Any) -> None:
    """The TPU values the guide writes in prose: parallelism, context length, parsers."""
    (engine,) = plan_json(env=TPU_LEADER_ENV)["processes"]
    tp, ep = guide_values(r"\tTP=(\d+) \S EP=(\d+)", guide_line("Parallelism\t"))
    (context,) = guide_values(r"\t([\d,]+) tokens", guide_line("Context length\t"))
    note = guide_line("On TPU 7x (ACCELERATOR_TYPE=tpu)")
    flags = [[flag, value] for flag, value in re.findall(r"(--[a-z-]+)[ =]([a-z0-9_]+)", note)]
    assert [f[0] for f in flags] == ["--grammar-backend", "--tool-call-parser"]
    for fragment in [
        ["--tp-size", tp],
        ["--ep-size", ep],
        ["--context-length", context.replace(",", "")],
        *flags,
    ]:
        assert runs(fragment, engine["argv"]), fragment


def test_the_router_values_match_the_prefill_pods(plan_json: Any) -> None:
    """The router hashes blocks with the engines' seed and subscribes where they publish."""
    note = guide_line("On GPU (kimi-k3-1-gpu.values.yaml)")
    (seed,) = guide_values(r'hashSeed: "(\d+)"', note)
    (port,) = guide_values(r"kvEventsConfig on :(\d+)", note)
    plan = plan_json(env=lws(PREFILL_LEADER, 2, 0, "10.64.1.10", "prefill"))
    assert processes(plan)["engine"]["env"]["PYTHONHASHSEED"] == seed
    assert plan["kv_events"]["sources"][0]["port"] == int(port)


def test_runs_rejects_what_the_guide_does_not_say() -> None:
    """Negative control for the guide checks above."""
    argv = ["vllm", "serve", "m", "--max-num-seqs", "32", "--kv-connector=nixlv2", "--use-replayssm",
            "--speculative-config", j(DSPARK)]  # fmt: skip
    assert runs(["--max-num-seqs", "32", "--use-replayssm", "--kv-connector", "nixlv2"], argv)
    assert runs(["--speculative-config", json.dumps(DSPARK, indent=1)], argv)
    assert not runs(["--max-num-seqs", "64"], argv)
    assert not runs(["--enable-prefix-caching"], argv)
    assert not runs(["--kv-connector=sglang"], argv)
    assert not runs(["sglang", "--max-num-seqs", "32"], argv)
    assert not runs(["--speculative-config", j({**DSPARK, "num_speculative_tokens": 4})], argv)
