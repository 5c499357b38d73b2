"""Pure plan builders: Settings + Recipe -> Role -> Plan. No I/O, no clocks, no randomness."""

from __future__ import annotations

from launcher.config.recipe import Recipe
from launcher.config.settings import Settings
from launcher.contract.plan import Plan, ShutdownBudget
from roles.context import BuildContext
from roles.derive import derive_role


def build_plan(settings: Settings, recipe: Recipe, group_member: int | None = None) -> Plan:
    """This pod's plan; with `group_member`, the plan of that pod of its LWS group."""
    derived = derive_role(settings, recipe, group_member)
    ctx = BuildContext(
        recipe=recipe,
        recipe_source=settings.recipe_source,
        role=derived.role,
        pod=derived.pod,
        runtime_dir=settings.runtime_dir,
        extra_args=settings.extra_args,
        extra_env=settings.extra_env,
        shutdown=ShutdownBudget.from_grace(settings.grace_seconds, settings.deregister_seconds),
        check_flags=settings.check_flags,
        probe_port=settings.probe_port,
        peer_lost_seconds=settings.peer_lost_seconds,
        stall_seconds=settings.stall_seconds,
        canary_seconds=settings.canary_seconds,
        startup_seconds=settings.startup_seconds,
    )
    from roles.engines import family_of
    from roles.needs import with_host_needs

    family = family_of(derived.pool)
    plan = family.build(ctx, derived.pool)
    return with_host_needs(plan, family, derived.pool, derived.role.pool, derived.pod.pod_ip)
