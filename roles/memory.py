"""Host memory one pod of a pool allocates or pins, added up from its recipe pool: pure arithmetic
that the memory preflight (against the container's limit and RLIMIT_MEMLOCK) and the manifests'
memory requests and limits share, so the two cannot disagree (tests/unit/deploy/test_manifests.py).

What a pool allocates is its engine family's `host_memory` (roles/engines/). Mooncake registers its
segments for RDMA, so they are pinned, resident memory, charged to the pod:
- vLLM's MooncakeStoreConnector: every GPU worker process holds its own store client, which mounts
  `global_segment_size` into the pool and keeps a `local_buffer_size` transfer buffer (vLLM 0.32.0
  vllm/distributed/mooncake_store.py: both default to 4 GiB; mode standalone-store mounts none);
- a mooncake-donor (mooncake_client) mounts its `global_segment_size`;
- SGLang's HiCache host pool, when `--hicache-size` says how large (with `--hicache-ratio` it is
  sized from the device pool at run time, so it cannot be known here), in the pool's args or the
  pod's LLMD_EXTRA_ARGS (which override them on the engine's command line too);
- the recipe's `host.engine_memory` (the processes themselves) and `host.shm` (/dev/shm, a
  memory-backed emptyDir: a limit the manifests must hold, not an allocation the preflight counts).
Sizes are read the way vLLM reads them: GB, MB, KB are powers of 1024 (launcher/config/recipe.py).
"""

from __future__ import annotations

from launcher.config.recipe import EnginePool, Pool
from launcher.contract.plan import MemoryItem
from launcher.contract.record import record
from roles.args import extra_arg_values
from roles.context import EXTRA_ARGS
from roles.engines import family_of

ENGINE = "engine (recipe host.engine_memory)"


@record
class PodMemory:
    """What a pod's manifest must request: the plan's items plus /dev/shm."""

    segments: int  # bytes pinned or allocated for Mooncake and HiCache
    overhead: int  # the processes themselves (recipe host.engine_memory)
    shm: int  # /dev/shm (recipe host.shm)

    @property
    def total(self) -> int:
        return self.segments + self.overhead + self.shm


def pod_memory(pool: Pool, pool_name: str = "pool", extra_args: str = "") -> PodMemory:
    items = plan_memory(pool, pool_name, extra_args)
    overhead = sum(i.size for i in items if i.what == ENGINE)
    return PodMemory(sum(i.size for i in items) - overhead, overhead, pool.host.shm)


def plan_memory(pool: Pool, pool_name: str, extra_args: str = "") -> tuple[MemoryItem, ...]:
    """What one pod of this pool allocates on the host, item by item, with the engine's args as its
    command line has them (the recipe's, then LLMD_EXTRA_ARGS). Pinned items are what RDMA registers
    (RLIMIT_MEMLOCK counts them per process)."""
    if extra_args and isinstance(pool, EnginePool):
        pool = pool.model_copy(update={"args": {**pool.args, **extra_arg_values(extra_args, EXTRA_ARGS)}})
    items = family_of(pool).host_memory(pool, f"pools.{pool_name}")
    if pool.host.engine_memory is not None:
        items.append(MemoryItem(ENGINE, pool.host.engine_memory))
    return tuple(items)
