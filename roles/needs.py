"""What the host must provide for a plan (modules, memory, checkpoint, drafter, network identity),
derived from the recipe pool and the plan's own argv. Pure: preflight checks it, the dry-run shows it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from launcher.config.recipe import EnginePool, Pool, transfer_connectors
from launcher.contract.plan import (
    IFNAME_PLACEHOLDER,
    POD_IP_PLACEHOLDER,
    DerivedEnv,
    FileSpec,
    HostNeeds,
    ModuleNeed,
    Plan,
    ProcessSpec,
    RdmaNeed,
    RdmaPort,
)
from roles.args import flag_value
from roles.engines.family import EngineFamily
from roles.engines.transports import ENGINE_RDMA_VARS, IFNAME_VARS, UCX_DEVICES_VAR, UCX_MODULE, rdma_values
from roles.flags import FlagCatalog
from roles.memory import plan_memory


def with_host_needs(
    plan: Plan,
    family: EngineFamily[Any],
    pool: Pool,
    pool_name: str,
    pod_ip: str,
    catalog: FlagCatalog | None,
    extra_args: str = "",
) -> Plan:
    """The plan with its HostNeeds and, for engines (a family with a flag catalogue), the network
    identity env filled in."""
    advisory = tuple(pool.host.advisory)
    memory = plan_memory(pool, pool_name, extra_args)
    shm = family.shm_segments
    where = f"pools.{pool_name}"
    master = family.store_master(pool, where)
    rdma = _rdma_need(family.rdma(pool, where), network=family.host_ip_var is not None)
    private_shm = family.shm_across_pods if plan.role.group_size > 1 else None
    if private_shm:
        note = (
            "/dev/shm must not be shared across this group's pods unless they share the network too "
            "(hostIPC or a hostPath /dev/shm without hostNetwork): preflight refuses it, `plan --group` "
            "cannot see the pod spec"
        )
        plan = replace(plan, notes=(*plan.notes, note))
    if catalog is None or family.host_ip_var is None:
        needs = HostNeeds(
            memory=memory, advisory=advisory, shm_segments=shm, rdma=rdma, store_master=master,
            private_shm=private_shm,
        )  # fmt: skip
        return replace(plan, needs=needs)
    engine = plan.engine
    network = pod_ip != POD_IP_PLACEHOLDER or plan.role.group_size > 1
    env, derived = _network_env(engine, family.host_ip_var, pod_ip) if network else (dict(engine.env), ())
    placeholders = plan.placeholders
    if network and pod_ip == POD_IP_PLACEHOLDER and "POD_IP" not in placeholders:
        placeholders = ("POD_IP", *placeholders)
    needs = HostNeeds(
        modules=_modules(engine.argv, family),
        memory=memory,
        model_files=bool(plan.model_path and plan.model_path.startswith("/")),
        drafter=_drafter(engine.argv),
        engine_package=family.package,
        catalog_version=catalog.version,
        catalog_source=catalog.source,
        engine_versions=pool.engine_versions if isinstance(pool, EnginePool) else None,
        network=network,
        host_ip_var=family.host_ip_var,
        ifname_vars=IFNAME_VARS,
        shm_segments=shm,
        derived_env=derived,
        rdma=rdma,
        store_master=master,
        private_shm=private_shm,
        advisory=advisory,
    )
    processes = (replace(engine, env=env), *plan.processes[1:])
    return replace(plan, processes=processes, needs=needs, placeholders=placeholders)


def accelerators(pool: Pool, gpus_per_node: int | None) -> int | None:
    """The accelerator devices a pod of this pool drives (its parallelism: devices_per_pod), when the
    recipe's gpus_per_node or LLMD_GPUS_PER_NODE says it holds any; None for a CPU pool or a service."""
    if not isinstance(pool, EnginePool) or (pool.gpus_per_node is None and gpus_per_node is None):
        return None
    return pool.parallelism().devices_per_pod


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
        for name in IFNAME_VARS
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
    """The plan as spawned: the interface preflight found replaces its placeholder. An engine whose KV
    connector runs over UCX (NIXL) and was given no RDMA port (fill_rdma, before) gets that interface
    as UCX's device, like gloo and NCCL: UCX's own pick would include lo and any other NIC; its
    transports stay UCX's choice (a set value, the recipe's or the RDMA ports', wins)."""
    ucx = any(m.module == UCX_MODULE for m in plan.needs.modules)
    processes = []
    for p in plan.processes:
        env = {k: v.replace(IFNAME_PLACEHOLDER, ifname) for k, v in p.env.items()}
        if ucx and p.name == plan.engine.name:
            env.setdefault(UCX_DEVICES_VAR, ifname)
        processes.append(replace(p, env=env))
    return replace(plan, processes=tuple(processes))


def _rdma_need(transfers: RdmaNeed | None, *, network: bool) -> RdmaNeed | None:
    """An engine names its RDMA ports for NCCL and UCX; its family adds what its transfers name."""
    if not network:
        return transfers
    transfers = transfers or RdmaNeed()
    return replace(transfers, env=tuple(dict.fromkeys((*ENGINE_RDMA_VARS, *transfers.env))))


def fill_rdma(plan: Plan, ports: Sequence[RdmaPort]) -> Plan:
    """The plan as spawned on a pod with these RDMA ports: the engine's RDMA variables, a Mooncake store
    file's device_name and a donor's --device_names, wherever the recipe left them unset or empty.
    No ports: nothing changes (a transport is never forced)."""
    need = plan.needs.rdma
    if need is None or not ports:
        return plan
    values = rdma_values(ports)
    devices = ",".join(dict.fromkeys(p.device for p in ports))
    engine = plan.engine
    env = dict(engine.env)
    env.update({k: values[k] for k in need.env if k in values and k not in env})
    flag = need.device_flag
    argv = tuple(f"{flag}{devices}" if word == flag else word for word in engine.argv)
    config = engine.env.get(need.device_file_env) if need.device_file_env else None
    files = tuple(_with_device_name(f, devices) if f.path == config else f for f in plan.files)
    processes = (replace(engine, env=env, argv=argv), *plan.processes[1:])
    return replace(plan, processes=processes, files=files)


def _with_device_name(file: FileSpec, devices: str) -> FileSpec:
    config = json.loads(file.content)
    if config.get("device_name"):
        return file
    return replace(file, content=json.dumps({**config, "device_name": devices}, indent=2) + "\n")


def _json(value: str | None) -> Mapping[str, object]:
    try:
        data = json.loads(value or "")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _modules(argv: Sequence[str], family: EngineFamily[Any]) -> tuple[ModuleNeed, ...]:
    """The modules the engine imports for its --load-format and KV connectors (its family's tables)."""
    needs: dict[str, ModuleNeed] = {}
    fmt = flag_value(argv, "--load-format") or ""
    if fmt in family.load_format_modules:
        module, package = family.load_format_modules[fmt]
        needs[module] = ModuleNeed(module, package, f"--load-format {fmt}")
    connector_modules = family.connector_modules
    for config in transfer_connectors(flag_value(argv, "--kv-transfer-config")):
        connector = str(config.get("kv_connector", ""))
        if connector in connector_modules and connector_modules[connector][0] not in needs:
            module, package = connector_modules[connector]
            needs[module] = ModuleNeed(module, package, f"--kv-transfer-config {connector}")
    return tuple(needs.values())


def _drafter(argv: Sequence[str]) -> str | None:
    model = _json(flag_value(argv, "--speculative-config")).get("model")
    return model if isinstance(model, str) and model else None
