"""Pure plan builders: Settings + Recipe -> Role -> Plan. No I/O, no clocks, no randomness."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import field, replace
from typing import Any

from launcher.config.recipe import Pool, Recipe
from launcher.config.settings import Settings, default_recipe_note
from launcher.contract.errors import ConfigError
from launcher.contract.plan import DEREGISTER_SHARE, Plan, RdmaPort, ShutdownBudget, share_words
from launcher.contract.record import record
from launcher.contract.redact import is_secret_name
from roles.context import BuildContext
from roles.derive import derive_role
from roles.flags import FlagCatalog, built_in_catalogs, catalog_warning, choose_catalog, version_key

_REFERENCE = re.compile(r"\$\(\w+\)|\$\{\w+\}")  # $(VAR) or ${VAR}: a name, not the secret itself


@record
class FoundInPod:
    """What only the running pod can find out; the dry-run shows a DNS name or a placeholder instead."""

    leader_ip: str | None = None  # LWS_LEADER_ADDRESS resolved (ZMQ and NCCL want an IP)
    interface: str | None = None  # the network interface that holds POD_IP (preflight finds it)
    rdma: tuple[RdmaPort, ...] = ()  # the pod's active RDMA ports (preflight reads them from sysfs)
    engine_version: str | None = None  # the installed engine's, as its interpreter reports it
    checkpoint_config: Mapping[str, Any] | None = None  # the mounted model's config.json (model.path)
    # The container's env switches (roles.engines.ENGINE_SWITCHES) the engine inherits beneath the plan's env.
    switches: Mapping[str, str] = field(default_factory=dict)


NOTHING_FOUND = FoundInPod()


def build_plan(
    settings: Settings,
    recipe: Recipe,
    group_member: int | None = None,
    found: FoundInPod = NOTHING_FOUND,
    shelf: Sequence[FlagCatalog] | None = None,
    engine_version: str | None = None,
    model_config: Mapping[str, Any] | None = None,
) -> Plan:
    """This pod's plan; with `group_member`, the plan of that pod of its LWS group. `found`: what the
    pod found out at run time, filled in here, in one place (launcher/run.py passes it). `shelf`: the
    flag catalogues to choose from, the image's before the built-in ones (launcher/catalogs).
    `engine_version`: the engine release to plan for (`plan --engine-version`), in place of the one
    the pod finds installed. `model_config`: the model's config.json (`plan --model-config`), in
    place of the mounted checkpoint's the pod found."""
    in_pod = (
        settings
        if found.leader_ip is None
        else settings.model_copy(update={"leader_address": found.leader_ip})
    )
    derived = derive_role(in_pod, recipe, group_member)
    from roles.engines import family_of
    from roles.needs import accelerators, fill_interface, fill_rdma, with_host_needs

    family = family_of(derived.pool)
    catalog = None
    catalog_notes: list[str] = []
    if family.catalog is not None:
        catalogs = built_in_catalogs() if shelf is None else shelf
        wanted = getattr(derived.pool, "engine_versions", None)
        if engine_version is not None:
            known = sorted({c.version for c in catalogs if c.name == family.catalog}, key=version_key)
            if engine_version not in known:
                raise ConfigError.one(
                    "--engine-version",
                    f"{family.name} {engine_version} has no flag catalogue here",
                    f"use one of {', '.join(known)}, or build its catalogue (llm-d-launcher catalog build)",
                )
        catalog = choose_catalog(
            catalogs, family.catalog, engine_version or found.engine_version, family.catalog_version, wanted
        )
        if warning := catalog_warning(catalog, derived.role.pool, wanted):
            catalog_notes.append(warning)
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
    config, setting = (
        (model_config, "--model-config")
        if model_config is not None
        else (found.checkpoint_config, "model.path")
    )
    if config is not None and catalog is not None:
        from roles.engines.model_config import model_config_problems

        engine_env = {**found.switches, **plan.engine.env}  # what the engine process will see
        tp = getattr(derived.pool, "tensor_parallel", None) or 1
        found_problems = model_config_problems(
            config,
            family.name,
            catalog.version,
            plan.engine.argv,
            tp,
            setting,
            longer_context_allowed=any(switch.is_on(engine_env) for switch in family.longer_context),
        )
        if found_problems:
            raise ConfigError(found_problems)
    notes = [*catalog_notes, *_input_notes(settings, recipe, derived.pool, ctx.shutdown)]
    if settings.pd_canary_prefiller is not None and plan.probes.pd_canary is None:
        notes.append(
            "LLMD_PD_CANARY_PREFILLER is set but this pod sends no P/D canary: it needs a disagg sidecar "
            "in front of a serving engine and the forward-progress watch (LLMD_STALL_SECONDS > 0)"
        )
    version = engine_version or found.engine_version
    if version and family.startup_phases and family.phase_lines(version) is None:
        newest = family.startup_phases[-1]
        notes.append(
            f"{family.name} {version}: start-up phases are read with the lines of {family.name} "
            f"{newest.since} to before {newest.before}; a phase its output no longer announces shows as "
            "the launcher's own, with the weight-loading progress still read"
        )
    plan = replace(plan, notes=(*plan.notes, *notes))
    plan = with_host_needs(
        plan, family, derived.pool, derived.role.pool, derived.pod.pod_ip, catalog, settings.extra_args
    )
    if (devices := accelerators(derived.pool, settings.gpus_per_node)) is not None:
        plan = replace(plan, needs=replace(plan.needs, accelerators=devices))
    plan = fill_rdma(plan, found.rdma)
    plan = plan if found.interface is None else fill_interface(plan, found.interface)
    from roles.capabilities import with_capabilities

    return with_capabilities(
        plan, recipe, derived.pool, family, settings.capability_seconds, settings.pd_canary_prefiller
    )


def _input_notes(settings: Settings, recipe: Recipe, pool: Pool, shutdown: ShutdownBudget) -> list[str]:
    """What the launcher changed or doubts in its inputs, said in the plan (and logged by `run`)."""
    notes = [note] if (note := default_recipe_note(settings)) else []
    notes += [
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
