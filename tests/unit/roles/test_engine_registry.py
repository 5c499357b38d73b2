"""The engine registry: every recipe pool class has one family, and a pod's plan carries its family's
facts to the runtime (healthchecks/ and launcher/supervise/ know no engine of their own)."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from launcher.config.recipe import Pool
from launcher.config.recipe_file import RecipeSource, load_recipe
from launcher.config.settings import Settings
from roles import build_plan
from roles.engines import FAMILIES, family_of


def test_every_pool_class_has_exactly_one_family() -> None:
    schema = set(get_args(get_args(Pool)[0]))
    registered = [pool for family in FAMILIES for pool in family.pools]
    assert sorted(map(str, registered)) == sorted(map(str, schema))
    assert len({family.name for family in FAMILIES}) == len(FAMILIES)


POOLS = [
    (recipe, pool)
    for recipe in ("kimi-k3.1-pro", "vllm-single-pod")
    for pool in load_recipe(RecipeSource(recipe, None)).pools
]


@pytest.mark.parametrize(("recipe", "pool"), POOLS, ids=[f"{r}/{p}" for r, p in POOLS])
def test_a_plan_carries_its_familys_runtime_facts(recipe: str, pool: str) -> None:
    loaded = load_recipe(RecipeSource(recipe, None))
    family = family_of(loaded.pools[pool])
    settings = Settings(recipe=recipe, pool=pool, pod_ip="10.0.0.7", stall_seconds=60)
    plan = build_plan(settings, loaded)
    assert plan.probes is not None
    assert plan.probes.progress == family.startup_output(family.catalog_version or None)
    assert plan.needs.shm_segments == family.shm_segments
    assert plan.needs.host_ip_var == family.host_ip_var
    if family.host_ip_var is not None:
        assert plan.engine.env[family.host_ip_var] == "10.0.0.7"
        assert plan.needs.engine_package == family.package
    if plan.kv_events is not None:
        assert plan.kv_events.served_metrics == family.served_metrics != ()
    if plan.probes.forward is not None:
        assert family.steps is not None
        assert plan.probes.forward.counters == family.steps.signals(plan.probes.forward.role) != ()


def test_the_p_d_role_follows_the_connectors_kv_role() -> None:
    """#32: a decode pod watches its generation, a prefill pod its prompt side; MultiConnector's NIXL
    child names the part (its MooncakeStore child is kv_both in the guide's prefill)."""
    from launcher.config.recipe import VllmPool
    from roles.engines.vllm import pd_role

    def pool(transfer: dict[str, Any] | None) -> VllmPool:
        args = {"kv-transfer-config": transfer} if transfer else {}
        return VllmPool.model_validate({"kind": "vllm", "args": args})

    def multi(nixl: str, store: str) -> dict[str, Any]:
        children = [
            {"kv_connector": "NixlConnector", "kv_role": nixl},
            {"kv_connector": "MooncakeStoreConnector", "kv_role": store},
        ]
        return {
            "kv_connector": "MultiConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"connectors": children},
        }

    assert pd_role(pool({"kv_connector": "NixlConnector", "kv_role": "kv_consumer"})) == "decode"
    assert pd_role(pool({"kv_connector": "NixlConnector", "kv_role": "kv_producer"})) == "prefill"
    assert pd_role(pool({"kv_connector": "NixlConnector", "kv_role": "kv_both"})) == "prefill and decode"
    assert pd_role(pool(multi("kv_producer", "kv_both"))) == "prefill"
    assert pd_role(pool(multi("kv_consumer", "kv_consumer"))) == "decode"
    assert pd_role(pool(None)) == "prefill and decode"
