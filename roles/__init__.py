"""Pure plan builders: Settings + Recipe -> Role -> Plan. No I/O, no clocks, no randomness."""

from __future__ import annotations

from launcher.plan import Plan
from launcher.recipe import MooncakeDonorPool, MooncakeMasterPool, Recipe, SglangPool, VllmPool
from launcher.settings import Settings
from roles.context import BuildContext
from roles.derive import derive_role, select_pool


def build_plan(settings: Settings, recipe: Recipe) -> Plan:
    role, pod = derive_role(settings, recipe)
    _, pool = select_pool(settings, recipe)
    ctx = BuildContext(recipe, role, pod, settings.runtime_dir, settings.extra_args, settings.extra_env)
    if isinstance(pool, VllmPool):
        from roles.vllm import build_vllm_plan

        return build_vllm_plan(ctx, pool)
    if isinstance(pool, SglangPool):
        from roles.sglang import build_sglang_plan

        return build_sglang_plan(ctx, pool)
    from roles.mooncake import build_donor_plan, build_master_plan

    if isinstance(pool, MooncakeMasterPool):
        return build_master_plan(ctx, pool)
    assert isinstance(pool, MooncakeDonorPool)
    return build_donor_plan(ctx, pool)
