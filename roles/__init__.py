"""Pure plan builders: Settings + Recipe -> Role -> Plan. No I/O, no clocks, no randomness."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from launcher.config.recipe import Pool, Recipe
from launcher.config.settings import Settings
from launcher.contract.plan import DEREGISTER_SHARE, Plan, RdmaPort, ShutdownBudget, share_words
from launcher.contract.record import record
from launcher.contract.redact import is_secret_name
from roles.context import BuildContext
from roles.derive import derive_role
from roles.flags import FlagCatalog, built_in_catalogs, choose_catalog

_REFERENCE = re.compile(r"\$\(\w+\)|\$\{\w+\}")  # $(VAR) or ${VAR}: a name, not the secret itself


@record
class FoundInPod:
    """What only the running pod can find out; the dry-run shows a DNS name or a placeholder instead."""

    leader_ip: str | None = None  # LWS_LEADER_ADDRESS resolved (ZMQ and NCCL want an IP)
    interface: str | None = None  # the network interface that holds POD_IP (preflight finds it)
    rdma: tuple[RdmaPort, ...] = ()  # the pod's active RDMA ports (preflight reads them from sysfs)
    engine_version: str | None = None  # the installed engine's, as its interpreter reports it


NOTHING_FOUND = FoundInPod()


def build_plan(
    settings: Settings,
    recipe: Recipe,
    group_member: int | None = None,
    found: FoundInPod = NOTHING_FOUND,
    shelf: Sequence[FlagCatalog] | None = None,
) -> Plan:
    """This pod's plan; with `group_member`, the plan of that pod of its LWS group. `found`: what the
    pod found out at run time, filled in here, in one place (launcher/run.py passes it). `shelf`: the
    flag catalogues to choose from, the image's before the built-in ones (launcher/catalogs)."""
    in_pod = (
        settings
        if found.leader_ip is None
        else settings.model_copy(update={"leader_address": found.leader_ip})
    )
    derived = derive_role(in_pod, recipe, group_member)
    from roles.engines import family_of
    from roles.needs import fill_interface, fill_rdma, with_host_needs

    family = family_of(derived.pool)
    catalog = None
    if family.catalog is not None:
        catalog = choose_catalog(
            built_in_catalogs() if shelf is None else shelf,
            family.catalog,
            found.engine_version,
            family.catalog_version,
        )
    ctx = BuildContext(
        recipe=recipe,
        recipe_source=settings.recipe_source,
        role=derived.role,
        pod=derived.pod,
        runtime_dir=settings.runtime_dir,
        extra_args=settings.extra_args,
        extra_env=settings.extra_env,
        shutdown=ShutdownBudget.from_grace(settings.grace_seconds, settings.deregister_seconds),
        catalog=catalog,
        allow_flags=settings.allowed_flags,
        probe_port=settings.probe_port,
        peer_lost_seconds=settings.peer_lost_seconds,
        leader_name=settings.leader_address,
        stall_seconds=settings.stall_seconds,
        canary_seconds=settings.canary_seconds,
        step_seconds=settings.step_seconds,
        startup_seconds=settings.startup_seconds,
        pd_canary_prefiller=settings.pd_canary_prefiller,
    )
    plan = family.build(ctx, derived.pool)
    notes = _input_notes(settings, recipe, derived.pool, ctx.shutdown)
    forward = plan.probes.forward
    if settings.pd_canary_prefiller is not None and (forward is None or forward.pd_canary is None):
        notes.append(
            "LLMD_PD_CANARY_PREFILLER is set but this pod sends no P/D canary: it needs a disagg sidecar "
            "in front of a serving engine and the forward-progress watch (LLMD_STALL_SECONDS > 0)"
        )
    version = found.engine_version
    if version and family.startup_phases and family.phase_lines(version) is None:
        newest = family.startup_phases[-1]
        notes.append(
            f"{family.name} {version}: start-up phases are read with the lines of {family.name} "
            f"{newest.since} to before {newest.before}; a phase its output no longer announces shows as "
            "the launcher's own, with the weight-loading progress still read"
        )
    plan = replace(plan, notes=(*plan.notes, *notes))
    plan = with_host_needs(plan, family, derived.pool, derived.role.pool, derived.pod.pod_ip, catalog)
    plan = fill_rdma(plan, found.rdma)
    plan = plan if found.interface is None else fill_interface(plan, found.interface)
    from roles.capabilities import with_capabilities

    return with_capabilities(
        plan, recipe, derived.pool, family, settings.capability_seconds, settings.pd_canary_prefiller
    )


def _input_notes(settings: Settings, recipe: Recipe, pool: Pool, shutdown: ShutdownBudget) -> list[str]:
    """What the launcher changed or doubts in its inputs, said in the plan (and logged by `run`)."""
    notes = [
        f"recipe env {name} holds a literal value under a secret's name: anyone who reads the recipe "
        f"(a ConfigMap, an image) reads it; remove it and give the pod {name} from a Secret "
        "(env valueFrom.secretKeyRef)"
        for name, value in {**recipe.env, **pool.env}.items()
        if is_secret_name(name) and value.strip() and not _REFERENCE.fullmatch(value.strip())
    ]
    if shutdown.deregister < settings.deregister_seconds:
        notes.append(
            f"LLMD_DEREGISTER_SECONDS={settings.deregister_seconds} is cut to {shutdown.deregister} s: "
            f"deregistration may take at most {share_words(DEREGISTER_SHARE)} of LLMD_GRACE_SECONDS="
            f"{settings.grace_seconds}, so the drain keeps the rest; for {settings.deregister_seconds} s "
            "raise "
            f"the pod's terminationGracePeriodSeconds and LLMD_GRACE_SECONDS to "
            f"{DEREGISTER_SHARE * settings.deregister_seconds}"
        )
    return notes
