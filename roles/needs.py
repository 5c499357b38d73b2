"""What the host must provide for a plan (modules, memory, checkpoint, drafter, network identity),
derived from the recipe pool and the plan's own argv. Pure: preflight checks it, the dry-run shows it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from launcher.config.recipe import Pool
from launcher.contract.plan import (
    IFNAME_PLACEHOLDER,
    POD_IP_PLACEHOLDER,
    DerivedEnv,
    HostNeeds,
    ModuleNeed,
    Plan,
    ProcessSpec,
)
from roles.engines.family import EngineFamily
from roles.flags import load_catalog
from roles.memory import plan_memory

# --load-format -> module (vLLM 0.32.0 model_loader: fastsafetensors is the vLLM extra of that name).
_LOAD_FORMAT_MODULES = {"fastsafetensors": ("fastsafetensors", "fastsafetensors")}
# Interface variables gloo and NCCL read.
_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def with_host_needs(plan: Plan, family: EngineFamily[Any], pool: Pool, pool_name: str, pod_ip: str) -> Plan:
    """The plan with its HostNeeds and, for engines (a family with a flag catalogue), the network
    identity env filled in."""
    advisory = tuple(pool.host.advisory)
    memory = plan_memory(pool, pool_name)
    shm = family.shm_segments
    if family.catalog is None or family.host_ip_var is None:
        return replace(plan, needs=HostNeeds(memory=memory, advisory=advisory, shm_segments=shm))
    engine = plan.engine
    flags = _flag_values(engine.argv)
    network = pod_ip != POD_IP_PLACEHOLDER or plan.role.group_size > 1
    env, derived = _network_env(engine, family.host_ip_var, pod_ip) if network else (dict(engine.env), ())
    placeholders = plan.placeholders
    if network and pod_ip == POD_IP_PLACEHOLDER and "POD_IP" not in placeholders:
        placeholders = ("POD_IP", *placeholders)
    needs = HostNeeds(
        modules=_modules(flags, family.connector_modules),
        memory=memory,
        model_files=bool(plan.model_path and plan.model_path.startswith("/")),
        drafter=_drafter(flags),
        engine_package=family.package,
        catalog_version=load_catalog_version(family.catalog),
        network=network,
        host_ip_var=family.host_ip_var,
        shm_segments=shm,
        derived_env=derived,
        advisory=advisory,
    )
    processes = (replace(engine, env=env), *plan.processes[1:])
    return replace(plan, processes=processes, needs=needs, placeholders=placeholders)


def load_catalog_version(name: str) -> str | None:
    return load_catalog(name).version


def _network_env(
    engine: ProcessSpec, host_ip_var: str, pod_ip: str
) -> tuple[dict[str, str], tuple[DerivedEnv, ...]]:
    """gloo and NCCL pick an interface themselves and, with eth0 plus RDMA NICs (GKE DRANET), pick
    wrong (vLLM #7074, SGLang #3226): name the one that holds POD_IP. Values the recipe or
    LLMD_EXTRA_ENV set win."""
    env = dict(engine.env)
    derived = []
    wanted = {
        name: (IFNAME_PLACEHOLDER, "the interface that holds POD_IP (found in the pod)")
        for name in _IFNAME_VARS
    }
    wanted[host_ip_var] = (pod_ip, "POD_IP")
    for name, (value, source) in wanted.items():
        if name in env:
            derived.append(DerivedEnv(engine.name, name, "recipe env or LLMD_EXTRA_ENV"))
            continue
        env[name] = value
        derived.append(DerivedEnv(engine.name, name, source))
    return env, tuple(derived)


def fill_interface(plan: Plan, ifname: str) -> Plan:
    """The plan as spawned: the interface preflight found replaces its placeholder."""
    processes = tuple(
        replace(p, env={k: v.replace(IFNAME_PLACEHOLDER, ifname) for k, v in p.env.items()})
        for p in plan.processes
    )
    return replace(plan, processes=processes)


def _flag_values(argv: Sequence[str]) -> dict[str, str]:
    """--flag value and --flag=value pairs of an argv (last one wins, as argparse does)."""
    out: dict[str, str] = {}
    for i, word in enumerate(argv):
        if not word.startswith("--"):
            continue
        name, eq, value = word[2:].partition("=")
        name = name.replace("_", "-")
        if eq:
            out[name] = value
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[name] = argv[i + 1]
        else:
            out[name] = ""
    return out


def _json(value: str | None) -> Mapping[str, object]:
    try:
        data = json.loads(value or "")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _connectors(config: Mapping[str, object]) -> list[str]:
    names = [str(config.get("kv_connector", ""))]
    extra = config.get("kv_connector_extra_config")
    if isinstance(extra, dict):
        for child in extra.get("connectors", []) or []:
            if isinstance(child, dict):
                names += _connectors(child)
    return names


def _modules(
    flags: Mapping[str, str], connector_modules: Mapping[str, tuple[str, str]]
) -> tuple[ModuleNeed, ...]:
    needs: dict[str, ModuleNeed] = {}
    fmt = flags.get("load-format")
    if fmt in _LOAD_FORMAT_MODULES:
        module, package = _LOAD_FORMAT_MODULES[fmt]
        needs[module] = ModuleNeed(module, package, f"--load-format {fmt}")
    for connector in _connectors(_json(flags.get("kv-transfer-config"))):
        if connector in connector_modules and connector_modules[connector][0] not in needs:
            module, package = connector_modules[connector]
            needs[module] = ModuleNeed(module, package, f"--kv-transfer-config {connector}")
    return tuple(needs.values())


def _drafter(flags: Mapping[str, str]) -> str | None:
    model = _json(flags.get("speculative-config")).get("model")
    return model if isinstance(model, str) and model else None
