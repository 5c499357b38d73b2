"""roles/memory.py: the host memory arithmetic, one pure function, over the Kimi recipe's pools."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.config.recipe import Pool
from launcher.config.recipe_file import load_recipe
from launcher.config.settings import load_settings
from launcher.contract.errors import ConfigError
from launcher.contract.plan import MemoryItem
from roles.memory import ENGINE, plan_memory, pod_memory
from roles.sizes import GIB, size_of


def pool(name: str) -> Pool:
    recipe = load_recipe(load_settings(recipe="kimi-k3.1-pro").recipe_source, name_given=True)
    return recipe.pools[name]


def derived(name: str) -> tuple[MemoryItem, ...]:
    """The items derived from the pool, without the recipe's stated host.engine_memory."""
    return tuple(i for i in plan_memory(pool(name), name) if i.what != ENGINE)


def test_prefill_pins_a_segment_and_a_buffer_per_worker() -> None:
    segment, buffer = derived("prefill")
    assert (segment.size, segment.processes, segment.pinned) == (4 * 160 * GIB, 4, True)  # 4 GPUs per pod
    assert (buffer.size, buffer.pinned) == (4 * 4 * GIB, True)  # vLLM's default local buffer


def test_donor_and_master() -> None:
    (donor,) = derived("mooncake-donor")
    assert (donor.size, donor.pinned) == (500 * GIB, True)
    assert derived("mooncake-master") == ()


def test_sglang_hicache_by_ratio_is_unknown_before_run() -> None:
    assert derived("tpu") == ()


def test_the_manifests_number_adds_the_stated_engine_memory_and_shm() -> None:
    need = pod_memory(pool("prefill"), "prefill")
    assert (need.segments, need.overhead, need.shm) == (4 * 164 * GIB, 96 * GIB, 64 * GIB)
    assert need.total == (4 * 164 + 96 + 64) * GIB


def test_sizes() -> None:
    assert size_of("160GB", "x") == 160 * GIB
    assert size_of("512MiB", "x") == 512 << 20
    assert size_of(4096, "x") == 4096
    with pytest.raises(ConfigError, match="is not a size"):
        size_of("lots", "pools.p.mooncake_store.global_segment_size")


def test_hicache_given_in_extra_args_is_counted(plan_json: Any) -> None:
    """The P/D SGLang guide's HiCache component is decode args the pod adds with LLMD_EXTRA_ARGS
    (deploy/pd-disaggregation-gpu-sglang/hicache/): its host pool, --hicache-size GB per TP rank, is
    what the memory preflight and lint hold against the container (64 GB x TP 2 = 128 GiB)."""
    extra = "--disaggregation-decode-enable-radix-cache --enable-hierarchical-cache --hicache-size=64"
    env = {"LLMD_POOL": "decode", "POD_IP": "10.0.0.1", "LLMD_EXTRA_ARGS": extra}
    plan = plan_json("--recipe", "pd-disaggregation-gpu-sglang", env=env)
    hicache = [m for m in plan["host_needs"]["memory"] if m["what"].startswith("sglang hicache")]
    assert [(m["bytes"], m["processes"]) for m in hicache] == [(128 * GIB, 2)]
    without = {k: v for k, v in env.items() if k != "LLMD_EXTRA_ARGS"}
    assert not any(m["what"].startswith("sglang hicache") for m in plan_json(
        "--recipe", "pd-disaggregation-gpu-sglang", env=without)["host_needs"]["memory"])  # fmt: skip


def test_extra_args_override_the_recipes_flags_for_the_count() -> None:
    tpu = pool("tpu")
    assert plan_memory(tpu, "tpu", "--hicache-size 10") != plan_memory(tpu, "tpu")
    assert plan_memory(tpu, "tpu", "--no-enable-hierarchical-cache --hicache-size 10") == plan_memory(
        tpu, "tpu"
    )
