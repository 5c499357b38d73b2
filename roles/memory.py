"""Host memory a pod will allocate or pin, added up from its recipe pool: pure arithmetic that the
preflight (against the container's memory limit and RLIMIT_MEMLOCK) and manifests can share.

Sizes follow Mooncake's and vLLM's parser: GB/MB/KB are powers of 1024 (vLLM 0.32.0
vllm/distributed/mooncake_store.py `_parse_size`, whose defaults are 4 GiB segment, 4 GiB buffer).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from launcher.config.recipe import MooncakeDonorPool, MooncakeMasterPool, Pool, SglangPool, VllmPool
from launcher.errors import ConfigError
from launcher.plan import MemoryItem

GIB = 1024**3
MOONCAKE_DEFAULT_SEGMENT = 4 * GIB  # vLLM 0.32.0 DEFAULT_GLOBAL_SEGMENT_SIZE
MOONCAKE_DEFAULT_BUFFER = 4 * GIB  # vLLM 0.32.0 DEFAULT_LOCAL_BUFFER_SIZE
_UNITS = {"tb": 1024**4, "gb": GIB, "mb": 1024**2, "kb": 1024, "b": 1, "": 1}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


def parse_size(value: object, where: str) -> int:
    """Bytes from 160GB, 512MB, 4096 or an int; one line naming the field when it is not a size."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = _SIZE.match(str(value).lower().replace("ib", "b"))
    if isinstance(value, bool) or match is None or match.group(2) not in _UNITS:
        raise ConfigError.one(
            where, f"{str(value)[:40]!r} is not a size", "write it like 160GB, 512MB or bytes"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def plan_memory(pool: Pool, pool_name: str) -> tuple[MemoryItem, ...]:
    """What one pod of this pool allocates on the host, item by item. Pinned items are what RDMA
    registers (RLIMIT_MEMLOCK counts them per process)."""
    items: list[MemoryItem] = []
    where = f"pools.{pool_name}"
    if isinstance(pool, VllmPool) and pool.mooncake_store is not None:
        items += _mooncake_store(
            pool.mooncake_store.config, pool.devices_per_pod()[0], f"{where}.mooncake_store"
        )
    if isinstance(pool, SglangPool):
        items += _hicache(pool.args, pool, where)
    if isinstance(pool, MooncakeDonorPool):
        size = parse_size(pool.global_segment_size, f"{where}.global_segment_size")
        items.append(MemoryItem("mooncake donor segment", size, 1, pool.protocol == "rdma"))
    if isinstance(pool, MooncakeMasterPool) and "global_segment_size" in pool.args:
        size = parse_size(pool.args["global_segment_size"], f"{where}.args.global_segment_size")
        items.append(MemoryItem("mooncake master segment", size, 1, False))
    stated = pool.host.engine_memory
    if stated is not None:
        items.append(
            MemoryItem(
                "engine (recipe host.engine_memory)", parse_size(stated, f"{where}.host.engine_memory")
            )
        )
    return tuple(items)


def _mooncake_store(config: Mapping[str, Any], processes: int, where: str) -> list[MemoryItem]:
    """Embedded mode: every worker process (one per local device) that loads MooncakeStoreConnector
    contributes a segment and registers a local transfer buffer (vLLM 0.32.0 MooncakeStoreConfig)."""
    pinned = config.get("protocol", "rdma") == "rdma"
    items = []
    if config.get("mode", "embedded") == "embedded":
        segment = parse_size(
            config.get("global_segment_size", MOONCAKE_DEFAULT_SEGMENT), f"{where}.global_segment_size"
        )
        items.append(
            MemoryItem(
                f"mooncake store segment x {processes} processes", segment * processes, processes, pinned
            )
        )
    buffer = parse_size(
        config.get("local_buffer_size", MOONCAKE_DEFAULT_BUFFER), f"{where}.local_buffer_size"
    )
    items.append(
        MemoryItem(f"mooncake local buffer x {processes} processes", buffer * processes, processes, pinned)
    )
    return items


def _hicache(args: Mapping[str, Any], pool: SglangPool, where: str) -> list[MemoryItem]:
    """SGLang's HiCache host pool is known only when --hicache-size (GB per rank) is given; the
    --hicache-ratio form depends on the device KV pool, sized at run time."""
    size = args.get("hicache-size", args.get("hicache_size"))
    if not args.get("enable-hierarchical-cache", args.get("enable_hierarchical_cache")) or not size:
        return []
    ranks = pool.devices_per_pod()[0]
    per_rank = parse_size(
        f"{size}GB" if str(size).replace(".", "", 1).isdigit() else size, f"{where}.args.hicache-size"
    )
    return [MemoryItem(f"sglang hicache host pool x {ranks} ranks", per_rank * ranks, ranks, False)]
