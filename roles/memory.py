"""Host memory one pod of a pool needs: the number its manifest's memory request and limit must hold
(tests/unit/test_manifests.py checks that they do) and a memory preflight can compare with the node.

Mooncake registers its segments for RDMA, so they are pinned, resident memory, charged to the pod:
- vLLM's MooncakeStoreConnector: every GPU worker process holds its own store client, which mounts
  `global_segment_size` into the pool and keeps a `local_buffer_size` transfer buffer (vLLM 0.32.0
  vllm/distributed/mooncake_store.py: both default to 4 GiB; mode standalone-store mounts none);
- a mooncake-donor (mooncake_client) mounts its `global_segment_size`;
- mooncake_master holds metadata only.
On top come the recipe's `memory.overhead` (the processes themselves) and `memory.shm` (/dev/shm is a
memory-backed emptyDir, charged to the pod as well).
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.config.recipe import MooncakeDonorPool, MooncakeStoreSpec, Pool, VllmPool, parse_size

GiB = 1 << 30
# vLLM 0.32.0 vllm/distributed/mooncake_store.py DEFAULT_GLOBAL_SEGMENT_SIZE, DEFAULT_LOCAL_BUFFER_SIZE
STORE_DEFAULT_SEGMENT = 4 * GiB
STORE_DEFAULT_LOCAL_BUFFER = 4 * GiB


@dataclass(frozen=True)
class PodMemory:
    segments: int  # bytes pinned for Mooncake (segments and transfer buffers of every holder)
    overhead: int  # the processes themselves (recipe memory.overhead)
    shm: int  # /dev/shm (recipe memory.shm)

    @property
    def total(self) -> int:
        return self.segments + self.overhead + self.shm


def pod_memory(pool: Pool) -> PodMemory:
    """What one pod of `pool` needs in host memory, in bytes."""
    segments = 0
    if isinstance(pool, VllmPool) and pool.mooncake_store is not None:
        workers, _ = pool.devices_per_pod()  # one GPU worker process per device, each a store client
        segments = workers * store_client_bytes(pool.mooncake_store)
    elif isinstance(pool, MooncakeDonorPool):
        segments = parse_size(pool.global_segment_size)
    memory = pool.memory
    return PodMemory(segments, memory.overhead if memory else 0, memory.shm if memory else 0)


def store_client_bytes(spec: MooncakeStoreSpec) -> int:
    """One MooncakeStoreConnector client: its mounted segment plus its local transfer buffer."""
    config = spec.config
    segment = 0
    if config.get("mode", "embedded") == "embedded":
        segment = parse_size(config.get("global_segment_size", STORE_DEFAULT_SEGMENT))
    return segment + parse_size(config.get("local_buffer_size", STORE_DEFAULT_LOCAL_BUFFER))
