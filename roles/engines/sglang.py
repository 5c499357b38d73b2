"""SGLang: its facts (SGLANG, at the end) and its multi-host pods (e.g. one TPU slice per LWS group):
the same command on every host, --node-rank = LWS_WORKER_INDEX, the HTTP API only on the leader."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from launcher.config.recipe import KVEventsSpec, SglangPool
from launcher.contract.addresses import host_port
from launcher.contract.phases import CAPTURING_GRAPHS, DISTRIBUTED_INIT, INITIALIZING, LOADING_WEIGHTS
from launcher.contract.plan import (
    Canary,
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
    RefusalShapes,
    RoleKind,
)
from roles.args import Arg, arg, flag_key, to_json
from roles.context import BuildContext, owned_flags
from roles.engines.capability_adapter import CapabilityAdapter, KvPool, MetricNames
from roles.engines.disagg_sidecar import SIDECAR_OWNED, disagg_sidecar
from roles.engines.family import EngineFamily, EnvSwitch, PhaseLines, StepSignals
from roles.engines.vllm_connectors import kv_events_topic
from roles.probes import completion_body, pooling_body
from roles.sizes import size_of

LAUNCH_SERVER = ["python3", "-m", "sglang.launch_server"]

_OWNED = {
    **owned_flags(
        "it follows the LWS env; change the recipe's topology instead",
        "nnodes",
        "node-rank",
        "dist-init-addr",
        "nccl-init-addr",
    ),
    **owned_flags("set the pool's tensor_parallel in the recipe", "tp-size", "tensor-parallel-size", "tp"),
    **owned_flags("set the pool's pipeline_parallel in the recipe", "pp-size", "pipeline-parallel-size"),
    **owned_flags("set the pool's port in the recipe", "port"),
    **owned_flags(
        "set model.path / model.served_name in the recipe", "model-path", "model", "served-model-name"
    ),
    **owned_flags("set the pool's kv_events in the recipe", "kv-events-config"),
}


def build_sglang_plan(ctx: BuildContext, pool: SglangPool) -> Plan:
    role = ctx.role
    ctx.check_recipe_args(pool.args, _OWNED, "args", SGLANG.catalog)
    if pool.disagg_sidecar:
        ctx.check_recipe_args(pool.disagg_sidecar.args, SIDECAR_OWNED, "disagg_sidecar.args")
    model = ctx.recipe.model_for(pool)
    leader = role.kind == RoleKind.LEADER
    args: list[Arg] = [*arg("model-path", model.path), *arg("served-model-name", model.served_name)]
    args += arg("tp-size", pool.tensor_parallel)
    args += arg("pp-size", pool.pipeline_parallel)
    if role.group_size > 1:
        dist_init = host_port(role.leader_address or "", pool.dist_init_port)
        args += [
            *arg("nnodes", role.group_size),
            *arg("node-rank", role.worker_index),
            *arg("dist-init-addr", dist_init),
        ]
    if leader:
        args += [*arg("host", "0.0.0.0"), *arg("port", pool.port)]
        if flag_key("enable-metrics") not in {
            flag_key(f) for f in pool.args
        }:  # the forward-progress watch reads its token counters
            args += arg("enable-metrics")
    if pool.kv_events:
        topic = kv_events_topic(ctx.pod.pod_ip, pool.port, model.name)
        args += arg("kv-events-config", to_json(sglang_kv_events_config(pool.kv_events, topic)))
    args += ctx.recipe_args(pool.args, SGLANG.catalog)
    argv, notes = ctx.command(LAUNCH_SERVER, args, _OWNED, SGLANG.catalog)

    ports: list[PortSpec] = []
    if leader:
        ports.append(PortSpec(pool.port, "http"))
        if role.group_size > 1:
            ports.append(PortSpec(pool.dist_init_port, "dist-init"))
        if pool.kv_events:
            ports.append(PortSpec(pool.kv_events.port, "kv-events-rank0"))
            if pool.kv_events.replay_port:
                ports.append(PortSpec(pool.kv_events.replay_port, "kv-replay-rank0"))
    engine = ProcessSpec(
        name="engine",
        argv=argv,
        env=ctx.env(ctx.recipe.env, pool.env),
        critical=True,
        ports=tuple(ports),
        health=HttpCheck(pool.port, "/health") if leader else None,
    )
    processes = [engine]
    if pool.disagg_sidecar and leader:  # a P/D decode pod: the router's requests reach it first
        processes.append(disagg_sidecar(pool.disagg_sidecar, pool.port, range(1), ctx))
    watch = ctx.progress_watch(
        [ProgressSource("engine", pool.port)],
        SGLANG,
        pd_role(pool),
        _canary(pool, model.served_name or model.path),
    )
    return ctx.plan(
        processes,
        notes=notes,
        model_path=model.path,
        leader_port=pool.port,
        progress=SGLANG.startup_output(ctx.engine_release),
        kv_events=_kv_events_watch(pool, engine, model.path) if leader else None,
        forward=watch,
        pd_sidecar=pool.disagg_sidecar if leader else None,
    )


def sglang_kv_events_config(spec: KVEventsSpec, topic: str) -> dict[str, Any]:
    """SGLang's --kv-events-config (SGLang 0.5.23 srt/disaggregation/kv_events.py KVEventsConfig):
    vLLM's shape without `enable_kv_cache_events`, which SGLang's model refuses. `tcp://*:PORT` binds."""
    config: dict[str, Any] = {"publisher": "zmq", "endpoint": f"tcp://*:{spec.port}", "topic": topic}
    if spec.replay_port is not None:
        config["replay_endpoint"] = f"tcp://*:{spec.replay_port}"
    if spec.buffer_steps is not None:
        config["buffer_steps"] = spec.buffer_steps
    if spec.hwm is not None:
        config["hwm"] = spec.hwm
    return config


def _kv_events_watch(pool: SglangPool, engine: ProcessSpec, model: str) -> KvEventsWatch | None:
    """The leader's one publisher (attention-TP rank 0), which the launcher subscribes to."""
    spec = pool.kv_events
    if spec is None:
        return None
    router = pool.router
    seed = engine.env.get("PYTHONHASHSEED")
    page = {flag_key(k): v for k, v in pool.args.items()}.get("page-size")
    return KvEventsWatch(
        (KvEventSource(0, spec.port, spec.replay_port, pool.port),),
        spec.silence_seconds,
        spec.readiness,
        block_size=router.block_size_tokens if router else None,
        block_size_readiness=router is not None and router.readiness,
        identity=KvIdentity(
            model=model,
            block_size=None if page is None else int(page),
            hash_seed="unset" if seed is None else hashlib.sha256(seed.encode()).hexdigest()[:12],
        ),
        served_metrics=SGLANG.served_metrics,
    )


def pd_role(pool: SglangPool) -> PdRole:
    """The pod's part in P/D: SGLang's --disaggregation-mode (prefill, decode; null: both)."""
    mode = {flag_key(k): v for k, v in pool.args.items()}.get("disaggregation-mode")
    return {"decode": PdRole.DECODE, "prefill": PdRole.PREFILL}.get(str(mode), PdRole.BOTH)


def _canary(pool: SglangPool, model: str) -> Canary:
    """An embedding (or reward) model served with --is-embedding answers /v1/embeddings, not
    /v1/completions (SGLang 0.5.23 srt/entrypoints/http_server.py). SGLang reads its API key from
    --api-key only (srt/utils/auth.py), which the launcher keeps off argv: the canary sends none."""
    embedding = pool.args.get("is-embedding", pool.args.get("is_embedding")) not in (None, False)
    return Canary(
        "/v1/embeddings" if embedding else "/v1/completions",
        pooling_body(model) if embedding else completion_body(model),
        SGLANG.api_key_env,
        key_fix="SGLang reads its key only from --api-key, which the launcher keeps off argv: serve the "
        "pool without one (authenticate in front of it), or a stalled idle engine goes unnoticed",
        path_fix="an embedding or reward model needs `is-embedding: true` in the pool's args, so the "
        "canary asks /v1/embeddings; any model must be served as model.served_name",
    )


def host_memory(pool: SglangPool, where: str) -> list[MemoryItem]:
    """SGLang's HiCache host pool is known only when --hicache-size (GB per rank) is given; with
    --hicache-ratio it is sized from the device pool at run time."""
    args: Mapping[str, Any] = pool.args
    size = args.get("hicache-size", args.get("hicache_size"))
    if not args.get("enable-hierarchical-cache", args.get("enable_hierarchical_cache")) or not size:
        return []
    ranks = pool.parallelism().devices_per_pod
    per_rank = size_of(
        f"{size}GB" if str(size).replace(".", "", 1).isdigit() else size, f"{where}.args.hicache-size"
    )
    return [MemoryItem(f"sglang hicache host pool x {ranks} ranks", per_rank * ranks, ranks, False)]


SGLANG_CAPABILITIES = CapabilityAdapter(
    render_paths={},  # llm-d's precise-prefix guide runs a vLLM render pool beside SGLang
    render_source="SGLang 0.5.23 serves no render endpoint (llm-d/llm-d guides/precise-prefix-cache-"
    "routing/render/standalone/)",
    metrics={
        "metric.queue-depth": MetricNames(
            ("sglang:num_queue_reqs",), "SGLang 0.5.22 srt/observability/metrics_collector.py:363"
        ),
        "metric.kv-cache-utilization": MetricNames(
            ("sglang:token_usage",), "SGLang 0.5.22 srt/observability/metrics_collector.py:397"
        ),
    },
    context_flag="context-length",
    kv_pool=KvPool(
        "/get_server_info",
        "SGLang 0.5.23 srt/entrypoints/http_server.py get_server_info (the scheduler's max_total_num_tokens)",
        json_key="max_total_num_tokens",
    ),
)

SGLANG = EngineFamily(
    name="sglang",
    capabilities=SGLANG_CAPABILITIES,
    pools=(SglangPool,),
    build=build_sglang_plan,
    host_memory=host_memory,
    catalog="sglang-server",
    catalog_version="0.5.23",
    package="sglang",
    host_ip_var="SGLANG_HOST_IP",  # SGLang 0.5.23 srt/utils/network.py reads it, then HOST_IP
    env_prefixes=("SGLANG", "SGL", "NCCL"),  # SGLang 0.5.23 sglang/srt/environ.py (SGLANG_, SGL_); NCCL
    # SGLang 0.5.22/0.5.23 srt/configs/model_config.py _derive_context_length: either switch on (its
    # CI one is a FIXME there) and it logs a warning instead of the ValueError; srt/environ.py EnvBool
    # reads "true", "1", "yes", "y" after lower(), not stripped.
    longer_context=tuple(
        EnvSwitch(name, ("true", "1", "yes", "y"))
        for name in ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "SGLANG_IS_IN_CI")
    ),
    # SGLang 0.5.23 srt/distributed/parallel_state.py in_the_same_node_as: a rank that can open rank
    # 0's /dev/shm segment is "on the same node" and reads the TP broadcast queue on 127.0.0.1.
    shm_across_pods="SGLang decides that TP ranks share a node by opening rank 0's /dev/shm segment, so "
    "pods sharing /dev/shm without sharing the network hang forever in TP init",
    # On the leader's /metrics, present only with --enable-metrics (SGLang 0.5.23
    # srt/observability/metrics_collector.py).
    # Its refusals (launcher/supervise/refusal.py): SGLang 0.5.23's config checks live in
    # srt/arg_groups/ and srt/server_args.py (ValueErrors and `assert`s).
    refusal=RefusalShapes("", r"/arg_groups/[^/]+\.py$|/server_args\.py$"),
    busy_gauges=("sglang:num_running_reqs", "sglang:num_queue_reqs"),  # metrics_collector.py too
    served_metrics=("sglang:num_requests", "sglang:num_running_reqs"),  # metrics_collector.py :1941 too
    steps=StepSignals(
        decode=('sglang:realtime_tokens_total{mode="decode"}',),
        prefill=(
            'sglang:realtime_tokens_total{mode="prefill_compute"}',
            'sglang:realtime_tokens_total{mode="prefill_cache"}',
        ),
        running=("sglang:num_running_reqs",),
        source="SGLang 0.5.22/0.5.23: realtime_tokens_total (srt/observability/metrics_collector.py "
        "increment_realtime_tokens) grows on every decode iteration and every prefill batch, chunk by "
        "chunk (srt/managers/scheduler_components/metrics_reporter.py report_decode_stats 'Every-iteration "
        "work', report_prefill_stats); prompt_tokens_total and generation_tokens_total count a request "
        "only when it finishes (observe_one_finished_request), so they stand still through any long request",
    ),
    # SGLang 0.5.23 srt/distributed/bootstrap.py (init_parallel_runtime), model_runner.py,
    # cuda_graph_setup.py; the same lines in 0.5.22 (both start-up logs on CPU).
    startup_phases=(
        PhaseLines(
            "0.5.22",
            "0.5.24",
            (
                PhasePattern("Init parallel begin", DISTRIBUTED_INIT),
                PhasePattern("Load weight begin", LOADING_WEIGHTS),
                PhasePattern("Load weight end", INITIALIZING),
                PhasePattern("CUDA graph begin", CAPTURING_GRAPHS),
            ),
        ),
    ),
    # No ready_timeout_env: SGLang has no start-up timeout that fires before the launcher's deadline.
    # --dist-timeout (default: torch's) bounds every collective, not only start-up, so it is left
    # alone; the 120 s warm-up wait (srt/entrypoints/http_server.py _wait_and_warmup) begins only once
    # the model is loaded.
    shm_segments=(r"sglang_loads_[\w.-]+\.shm",),  # SGLang srt/managers/load_snapshot.py
)
