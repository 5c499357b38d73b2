"""Host memory one pod of a pool allocates or pins, added up from its recipe pool: pure arithmetic
that the memory preflight (against the container's limit and RLIMIT_MEMLOCK) and the manifests'
memory requests and limits share, so the two cannot disagree (tests/unit/deploy/test_manifests.py).

Mooncake registers its segments for RDMA, so they are pinned, resident memory, charged to the pod:
- vLLM's MooncakeStoreConnector: every GPU worker process holds its own store client, which mounts
  `global_segment_size` into the pool and keeps a `local_buffer_size` transfer buffer (vLLM 0.32.0
  vllm/distributed/mooncake_store.py: both default to 4 GiB; mode standalone-store mounts none);
- a mooncake-donor (mooncake_client) mounts its `global_segment_size`;
- SGLang's HiCache host pool, when `--hicache-size` says how large (with `--hicache-ratio` it is
  sized from the device pool at run time, so it cannot be known here);
- the recipe's `host.engine_memory` (the processes themselves) and `host.shm` (/dev/shm, a
  memory-backed emptyDir: a limit the manifests must hold, not an allocation the preflight counts).
Sizes are read the way vLLM reads them: GB, MB, KB are powers of 1024 (launcher/config/recipe.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.config.recipe import (
    MooncakeDonorPool,
    MooncakeMasterPool,
    Pool,
    SglangPool,
    VllmPool,
    parse_size,
)
from launcher.contract.errors import ConfigError
from launcher.contract.plan import MemoryItem

GIB = 1 << 30
MOONCAKE_DEFAULT_SEGMENT = 4 * GIB  # vLLM 0.32.0 DEFAULT_GLOBAL_SEGMENT_SIZE
MOONCAKE_DEFAULT_BUFFER = 4 * GIB  # vLLM 0.32.0 DEFAULT_LOCAL_BUFFER_SIZE
ENGINE = "engine (recipe host.engine_memory)"


@dataclass(frozen=True)
class PodMemory:
    """What a pod's manifest must request: the plan's items plus /dev/shm."""

    segments: int  # bytes pinned or allocated for Mooncake and HiCache
    overhead: int  # the processes themselves (recipe host.engine_memory)
    shm: int  # /dev/shm (recipe host.shm)

    @property
    def total(self) -> int:
        return self.segments + self.overhead + self.shm


def pod_memory(pool: Pool, pool_name: str = "pool") -> PodMemory:
    items = plan_memory(pool, pool_name)
    overhead = sum(i.size for i in items if i.what == ENGINE)
    return PodMemory(sum(i.size for i in items) - overhead, overhead, pool.host.shm)


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
        size = size_of(pool.global_segment_size, f"{where}.global_segment_size")
        items.append(MemoryItem("mooncake donor segment", size, 1, pool.protocol == "rdma"))
    if isinstance(pool, MooncakeMasterPool) and "global_segment_size" in pool.args:
        size = size_of(pool.args["global_segment_size"], f"{where}.args.global_segment_size")
        items.append(MemoryItem("mooncake master segment", size, 1, False))
    if pool.host.engine_memory is not None:
        items.append(MemoryItem(ENGINE, pool.host.engine_memory))
    return tuple(items)


def size_of(value: object, where: str) -> int:
    """Bytes from 160GB, 512MiB or an int; one line naming the recipe field when it is not a size."""
    try:
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ValueError(f"{str(value)[:32]!r} is not a size")
        return parse_size(value)
    except ValueError as exc:
        raise ConfigError.one(where, str(exc), "write it like 160GB, 512MiB or a number of bytes") from None


def _mooncake_store(config: Mapping[str, Any], processes: int, where: str) -> list[MemoryItem]:
    """Embedded mode: every worker process (one per local device) that loads MooncakeStoreConnector
    contributes a segment and registers a local transfer buffer (vLLM 0.32.0 MooncakeStoreConfig)."""
    pinned = config.get("protocol", "rdma") == "rdma"
    items = []
    if config.get("mode", "embedded") == "embedded":
        segment = size_of(
            config.get("global_segment_size", MOONCAKE_DEFAULT_SEGMENT), f"{where}.global_segment_size"
        )
        items.append(
            MemoryItem(
                f"mooncake store segment x {processes} processes", segment * processes, processes, pinned
            )
        )
    buffer = size_of(config.get("local_buffer_size", MOONCAKE_DEFAULT_BUFFER), f"{where}.local_buffer_size")
    items.append(
        MemoryItem(f"mooncake local buffer x {processes} processes", buffer * processes, processes, pinned)
    )
    return items


def _hicache(args: Mapping[str, Any], pool: SglangPool, where: str) -> list[MemoryItem]:
    """SGLang's HiCache host pool is known only when --hicache-size (GB per rank) is given."""
    size = args.get("hicache-size", args.get("hicache_size"))
    if not args.get("enable-hierarchical-cache", args.get("enable_hierarchical_cache")) or not size:
        return []
    ranks = pool.devices_per_pod()[0]
    per_rank = size_of(
        f"{size}GB" if str(size).replace(".", "", 1).isdigit() else size, f"{where}.args.hicache-size"
    )
    return [MemoryItem(f"sglang hicache host pool x {ranks} ranks", per_rank * ranks, ranks, False)]
