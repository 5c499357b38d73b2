"""derive_role: which job this pod does, from the pool and the LWS env alone. Pure; raises ConfigError."""

from __future__ import annotations

from launcher.config.recipe import EnginePool, Pool, Recipe, gpu_count_mismatch
from launcher.config.settings import Settings
from launcher.contract.addresses import is_ip
from launcher.contract.errors import ConfigError, Problem
from launcher.contract.plan import LEADER_PLACEHOLDER, POD_IP_PLACEHOLDER, PodIdentity, Role, RoleKind
from launcher.contract.record import record
from roles import topology


@record
class PodFacts:
    """The pod-specific values a plan needs, with placeholders where only the pod knows them."""

    pod_ip: str
    identity: PodIdentity
    placeholders: tuple[str, ...]
    notes: tuple[str, ...]


@record
class Derived:
    pool: Pool
    role: Role
    pod: PodFacts


def select_pool(settings: Settings, recipe: Recipe) -> tuple[str, Pool]:
    name = settings.pool if settings.pool is not None else recipe.default_pool
    if name not in recipe.pools:
        raise ConfigError.one(
            "LLMD_POOL (--pool)",
            f"recipe {recipe.name} has no pool {name!r}",
            f"use one of {', '.join(recipe.pools)}",
        )
    return name, recipe.pools[name]


def derive_role(settings: Settings, recipe: Recipe, group_member: int | None = None) -> Derived:
    """This pod's role; with `group_member`, the role of that pod of the group (`plan --group`),
    whose IP is its own and so shown as a placeholder."""
    pool_name, pool = select_pool(settings, recipe)
    if not isinstance(pool, EnginePool):  # a service: one pod, not an LWS group
        return _service_role(settings, pool_name, pool, group_member is not None)
    role, pod = _engine_role(settings, pool_name, pool, group_member)
    return Derived(pool, role, pod)


def _pod(settings: Settings, in_group: bool, placeholders: list[str], notes: list[str]) -> PodFacts:
    identity = PodIdentity(settings.pod_name, settings.pod_namespace, settings.node_name)
    if settings.pod_ip is None or in_group:
        placeholders.insert(0, "POD_IP")
        if settings.lws_env_present and not in_group:
            notes.append(
                "POD_IP is not set: shown as $(POD_IP); give the pod POD_IP from fieldRef status.podIP"
            )
        return PodFacts(POD_IP_PLACEHOLDER, identity, tuple(placeholders), tuple(notes))
    return PodFacts(settings.pod_ip, identity, tuple(placeholders), tuple(notes))


def _service_role(settings: Settings, pool_name: str, pool: Pool, in_group: bool) -> Derived:
    if settings.group_size not in (None, 1):
        raise ConfigError.one(
            "LWS_GROUP_SIZE",
            f"is {settings.group_size}, but pool {pool_name} runs one pod per service",
            "run it as a Deployment or DaemonSet, or an LWS of size 1",
        )
    return Derived(pool, Role(pool_name, RoleKind.SERVICE), _pod(settings, in_group, [], []))


def _engine_role(
    settings: Settings, pool_name: str, pool: EnginePool, group_member: int | None
) -> tuple[Role, PodFacts]:
    problems: list[Problem] = []
    notes: list[str] = []
    placeholders: list[str] = []
    group_size = settings.group_size if settings.group_size is not None else pool.nodes
    if group_member is not None:
        index = group_member
    else:
        index = settings.worker_index if settings.worker_index is not None else 0
        if not settings.lws_env_present:
            notes.append(
                f"no LWS env: planning worker {index} of a group of {group_size} (the recipe's size)"
            )

    leader = settings.leader_address
    if leader is None and group_size > 1:  # a single pod has no leader to name
        if settings.lws_env_present:
            problems.append(
                Problem(
                    "LWS_LEADER_ADDRESS",
                    f"is not set but the group has {group_size} pods",
                    "run the pod under a LeaderWorkerSet, or set it to the leader pod's DNS name or IP",
                )
            )
        leader = LEADER_PLACEHOLDER
        placeholders.append("LWS_LEADER_ADDRESS")
    elif leader is not None and group_size > 1 and not is_ip(leader):
        notes.append(
            f"LWS_LEADER_ADDRESS {leader} is a DNS name, shown unresolved; ZMQ and NCCL need an IP, so it "
            "is resolved inside the pod before the engine starts"
        )

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
    # TPU_WORKER_ID describes this pod, also while `plan --group` plans the others.
    own_index = settings.worker_index if settings.worker_index is not None else index
    problems += _tpu_problems(settings, own_index, group_size)
    layout = pool.parallelism()
    if settings.gpus_per_node is not None and layout.devices_per_pod != settings.gpus_per_node:
        problems.append(
            Problem(
                "LLMD_GPUS_PER_NODE",
                f"is {gpu_count_mismatch(settings.gpus_per_node, layout, f'pool {pool_name}: ')}",
                f"change pools.{pool_name} parallelism or the pod's accelerator request",
            )
        )
    if problems:
        raise ConfigError(problems)

    if pool.local_ranks > 1:  # vLLM's layout data-parallel, the only one with several ranks per pod
        ranks = topology.dp_rank_range(index, pool.local_ranks)
        size = topology.dp_size(group_size, pool.local_ranks)
        role = Role(pool_name, RoleKind.DP_RANKS, index, group_size, leader, ranks, size, layout)
    else:
        kind = RoleKind.LEADER if index == 0 else RoleKind.WORKER
        role = Role(pool_name, kind, index, group_size, leader, parallelism=layout)
    return role, _pod(settings, group_member is not None, placeholders, notes)


def _tpu_problems(settings: Settings, index: int, group_size: int) -> list[Problem]:
    """The TPU runtime's view of the slice (LWS-injected) must match the engine's."""
    problems = []
    if settings.tpu_worker_id is not None and settings.tpu_worker_id != index:
        problems.append(
            Problem(
                "TPU_WORKER_ID",
                f"is {settings.tpu_worker_id} but LWS_WORKER_INDEX is {index}; the TPU runtime and the "
                "engine would disagree on this host's rank",
                "make the leader request TPUs too (LWS shifts TPU ids when it does not) or fix the env",
            )
        )
    if settings.tpu_worker_hostnames is not None:
        hosts = [h for h in settings.tpu_worker_hostnames.split(",") if h]
        if len(hosts) != group_size:
            problems.append(
                Problem(
                    "TPU_WORKER_HOSTNAMES",
                    f"lists {len(hosts)} hosts but the group has {group_size} pods",
                    "give every pod of the slice TPUs, or fix the LWS size",
                )
            )
    return problems
