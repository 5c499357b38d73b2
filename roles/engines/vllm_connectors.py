"""Per-pod connector configuration: KV-event publishing, NIXL side channel, Mooncake store file."""

from __future__ import annotations

import json
import posixpath
from typing import Any

from launcher.config.recipe import KVEventsSpec, MooncakeStoreSpec, NixlSpec
from launcher.contract.addresses import host_port, is_ip
from launcher.contract.errors import ConfigError
from launcher.contract.plan import FileSpec
from roles import topology


def kv_events_topic(pod_ip: str, api_port: int, model_name: str) -> str:
    """llm-d's topic `kv@<podIP>:<port>@<model>` (llm-d/llm-d-router pkg/kvevents, parseTopic)."""
    return f"kv@{host_port(pod_ip, api_port)}@{model_name}"


def vllm_kv_events_config(
    spec: KVEventsSpec, pool_name: str, start_rank: int, topic: str, ipc_dir: str | None = None
) -> dict[str, Any]:
    """vLLM's --kv-events-config. `tcp://*:PORT` makes vLLM bind (an IP would make it connect), and the
    base is lowered by the pod's first global DP rank so local rank l publishes on port + l.
    ipc_dir (IPv6 pods): publish on ipc:// there; the launcher relays on dual-stack TCP."""
    port = _compensated(spec.port, start_rank, pool_name, "port")
    config: dict[str, Any] = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": kv_events_ipc(ipc_dir, "kv-events", port) if ipc_dir else f"tcp://*:{port}",
        "topic": topic,
    }
    if spec.replay_port is not None:
        replay = _compensated(spec.replay_port, start_rank, pool_name, "replay_port")
        config["replay_endpoint"] = (
            kv_events_ipc(ipc_dir, "kv-replay", replay) if ipc_dir else f"tcp://*:{replay}"
        )
    if spec.buffer_steps is not None:
        config["buffer_steps"] = spec.buffer_steps
    if spec.hwm is not None:
        config["hwm"] = spec.hwm
    return config


# A Unix socket's path, without its NUL: sockaddr_un.sun_path holds 108 bytes on Linux, and libzmq
# refuses a longer ipc:// path at bind with ENAMETOOLONG (libzmq src/ipc_address.cpp, resolve).
MAX_SOCKET_PATH = 107


def kv_events_ipc(directory: str, name: str, port: int) -> str:
    """An ipc:// endpoint vLLM offsets per DP rank like a TCP one: vLLM 0.32.0
    ZmqEventPublisher.offset_endpoint_port adds the rank to the number after the last colon of any
    endpoint containing "tcp", so the path ends in `.tcp:<port>` and every rank gets its own socket.
    Refused here when too long for a socket: the engine would fail to bind only after loading."""
    path = f"{posixpath.join(directory, name)}.tcp:{port}"
    if len(path.encode()) > MAX_SOCKET_PATH:
        raise ConfigError.one(
            "LLMD_RUNTIME_DIR",
            f"makes this IPv6 pod's KV-event socket {path!r} {len(path.encode())} bytes long; a Unix "
            f"socket path holds at most {MAX_SOCKET_PATH} (108 bytes with its NUL)",
            f"choose a directory of at most {MAX_SOCKET_PATH - len(path.encode()) + len(directory.encode())} "
            "bytes, e.g. /tmp/llm-d-launcher",
        )
    return f"ipc://{path}"


def kv_events_need_relay(pod_ip: str) -> bool:
    """vLLM 0.32.0 binds tcp://*:N without zmq.IPV6 (vllm/distributed/kv_events.py `_bind` sets it only
    for tcp://*:0), so it listens on IPv4 alone: an IPv6 pod's router could never subscribe."""
    return is_ip(pod_ip) and ":" in pod_ip


def _compensated(port: int, start_rank: int, pool_name: str, field: str) -> int:
    base = topology.kv_events_base_port(port, start_rank)
    if base < 1:
        raise ConfigError.one(
            f"pools.{pool_name}.kv_events.{field}",
            f"{port} minus this pod's first DP rank {start_rank} is below 1",
            "choose a port above the group's highest DP rank",
        )
    return base


def nixl_env(spec: NixlSpec, pod_ip: str) -> dict[str, str]:
    """The handshake listener must advertise this pod's IP, not its default localhost (vLLM vllm/envs.py
    VLLM_NIXL_SIDE_CHANNEL_HOST; a host reused across nodes: ai-dynamo/dynamo#2706)."""
    return {
        "VLLM_NIXL_SIDE_CHANNEL_HOST": pod_ip,
        "VLLM_NIXL_SIDE_CHANNEL_PORT": str(spec.side_channel_port),
    }


def mooncake_store_file(spec: MooncakeStoreSpec, runtime_dir: str) -> FileSpec:
    return FileSpec(
        path=posixpath.join(runtime_dir, spec.file_name),
        content=json.dumps(spec.config, indent=2) + "\n",
    )
