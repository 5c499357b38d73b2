"""derive_role: which job this pod does, from the pool and the LWS env alone. Pure; raises ConfigError."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from launcher.errors import ConfigError, Problem
from launcher.plan import LEADER_PLACEHOLDER, POD_IP_PLACEHOLDER, Role, RoleKind
from launcher.recipe import (
    MooncakeDonorPool,
    MooncakeMasterPool,
    Pool,
    Recipe,
    SglangPool,
    VllmPool,
)
from launcher.settings import Settings
from roles import topology


@dataclass(frozen=True)
class PodFacts:
    """The pod-specific values a plan needs, with placeholders where only the pod knows them."""

    pod_ip: str
    placeholders: tuple[str, ...]
    notes: tuple[str, ...]


def select_pool(settings: Settings, recipe: Recipe) -> tuple[str, Pool]:
    name = settings.pool or recipe.default_pool
    if name not in recipe.pools:
        raise ConfigError.one(
            "LLMD_POOL (--pool)",
            f"recipe {recipe.name} has no pool {name!r}",
            f"use one of {', '.join(recipe.pools)}",
        )
    return name, recipe.pools[name]


def derive_role(settings: Settings, recipe: Recipe) -> tuple[Role, PodFacts]:
    pool_name, pool = select_pool(settings, recipe)
    if isinstance(pool, (MooncakeMasterPool, MooncakeDonorPool)):
        return _service_role(settings, pool_name)
    return _engine_role(settings, pool_name, pool)


def _pod_ip(settings: Settings) -> tuple[str, list[str]]:
    """`plan --group` passes the placeholder itself: each pod's IP is its own."""
    if settings.pod_ip in (None, POD_IP_PLACEHOLDER):
        return POD_IP_PLACEHOLDER, ["POD_IP"]
    return settings.pod_ip, []


def _address_notes(settings: Settings, leader: str | None) -> list[str]:
    notes = []
    if settings.lws_env_present and settings.pod_ip is None:
        notes.append("POD_IP is not set: shown as $(POD_IP); give the pod POD_IP from fieldRef status.podIP")
    if leader and leader != LEADER_PLACEHOLDER and not _is_ip(leader):
        notes.append(
            f"LWS_LEADER_ADDRESS {leader} is a DNS name, shown unresolved; ZMQ and NCCL need an IP, so it "
            "is resolved inside the pod before the engine starts"
        )
    return notes


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _service_role(settings: Settings, pool_name: str) -> tuple[Role, PodFacts]:
    if settings.group_size not in (None, 1):
        raise ConfigError.one(
            "LWS_GROUP_SIZE",
            f"is {settings.group_size}, but pool {pool_name} runs one pod per service",
            "run it as a Deployment or DaemonSet, or an LWS of size 1",
        )
    pod_ip, placeholders = _pod_ip(settings)
    return Role(pool_name, RoleKind.SERVICE), PodFacts(pod_ip, tuple(placeholders), ())


def _engine_role(settings: Settings, pool_name: str, pool: VllmPool | SglangPool) -> tuple[Role, PodFacts]:
    problems: list[Problem] = []
    notes: list[str] = []
    pod_ip, placeholders = _pod_ip(settings)

    group_size = settings.group_size if settings.group_size is not None else pool.nodes
    index = settings.worker_index if settings.worker_index is not None else 0
    leader = settings.leader_address
    if not settings.lws_env_present:
        notes.append(f"no LWS env: planning worker {index} of a group of {group_size} (the recipe's size)")
    if leader is None or leader == LEADER_PLACEHOLDER:
        if leader is None and settings.lws_env_present and group_size > 1:
            problems.append(
                Problem(
                    "LWS_LEADER_ADDRESS",
                    f"is not set but the group has {group_size} pods",
                    "run the pod under a LeaderWorkerSet, or set it to the leader pod's DNS name or IP",
                )
            )
        leader = LEADER_PLACEHOLDER
        placeholders.append("LWS_LEADER_ADDRESS")

    if group_size != pool.nodes:
        problems.append(
            Problem(
                "LWS_GROUP_SIZE",
                f"is {group_size} but pool {pool_name} of the recipe spans {pool.nodes} pods per group",
                f"set leaderWorkerTemplate.size: {pool.nodes}, or change pools.{pool_name}.nodes",
            )
        )
    if index >= group_size:
        problems.append(
            Problem(
                "LWS_WORKER_INDEX",
                f"is {index} but the group has only {group_size} pods (indices 0..{group_size - 1})",
                "set it from the leaderworkerset.sigs.k8s.io/worker-index label",
            )
        )
    if settings.tpu_worker_id is not None and settings.tpu_worker_id != index:
        problems.append(
            Problem(
                "TPU_WORKER_ID",
                f"is {settings.tpu_worker_id} but LWS_WORKER_INDEX is {index}; the TPU runtime and the "
                "engine would disagree on this host's rank",
                "make the leader request TPUs too (LWS shifts TPU ids when it does not) or fix the env",
            )
        )
    if settings.gpus_per_node is not None:
        devices, why = pool.devices_per_pod()
        if devices != settings.gpus_per_node:
            problems.append(
                Problem(
                    "LLMD_GPUS_PER_NODE",
                    f"is {settings.gpus_per_node} but pool {pool_name} needs {devices} per pod ({why})",
                    f"change pools.{pool_name} parallelism or the pod's accelerator request",
                )
            )
    if problems:
        raise ConfigError(problems)
    notes += _address_notes(settings, settings.leader_address if group_size > 1 else None)

    if isinstance(pool, VllmPool) and pool.layout == "data-parallel":
        ranks = topology.dp_rank_range(index, pool.local_ranks)
        size = topology.dp_size(group_size, pool.local_ranks)
        role = Role(pool_name, RoleKind.DP_RANKS, index, group_size, leader, ranks, size)
    else:
        kind = RoleKind.LEADER if index == 0 else RoleKind.WORKER
        role = Role(pool_name, kind, index, group_size, leader)
    return role, PodFacts(pod_ip, tuple(placeholders), tuple(notes))
