"""roles/memory.py: the host memory arithmetic, one pure function, over the Kimi recipe's pools."""

from __future__ import annotations

import pytest

from launcher.config.recipe import Pool, load_recipe
from launcher.config.settings import load_settings
from launcher.errors import ConfigError
from roles.memory import GIB, parse_size, plan_memory


def pool(name: str) -> Pool:
    recipe = load_recipe(load_settings(recipe="kimi-k3.1-pro").recipe_source, name_given=True)
    return recipe.pools[name]


def test_prefill_pins_a_segment_and_a_buffer_per_worker() -> None:
    items = plan_memory(pool("prefill"), "prefill")
    segment, buffer = items
    assert (segment.size, segment.processes, segment.pinned) == (4 * 160 * GIB, 4, True)  # 4 GPUs per pod
    assert (buffer.size, buffer.pinned) == (4 * 4 * GIB, True)  # vLLM's default local buffer


def test_donor_and_master() -> None:
    (donor,) = plan_memory(pool("mooncake-donor"), "mooncake-donor")
    assert (donor.size, donor.pinned) == (500 * GIB, True)
    assert plan_memory(pool("mooncake-master"), "mooncake-master") == ()


def test_sglang_hicache_by_ratio_is_unknown_before_run() -> None:
    assert plan_memory(pool("tpu"), "tpu") == ()


def test_sizes() -> None:
    assert parse_size("160GB", "x") == 160 * GIB
    assert parse_size("512MiB", "x") == 512 << 20
    assert parse_size(4096, "x") == 4096
    with pytest.raises(ConfigError, match="is not a size"):
        parse_size("lots", "pools.p.mooncake_store.global_segment_size")
