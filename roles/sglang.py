"""SGLang multi-host pods (e.g. one TPU slice per LWS group): the same command on every host,
--node-rank = LWS_WORKER_INDEX, the HTTP API only on the leader."""

from __future__ import annotations

from launcher.config.recipe import SglangPool
from launcher.contract.addresses import host_port
from launcher.contract.plan import HttpCheck, Plan, PortSpec, ProcessSpec, ProgressSource, RoleKind
from roles.args import Arg, arg, args_from, flag_key
from roles.context import BuildContext, owned_flags

SGLANG = ["python3", "-m", "sglang.launch_server"]
SGLANG_CATALOG = "sglang-server"
# Token counters on the leader's /metrics, present only with --enable-metrics (SGLang 0.5.23
# srt/observability/metrics_collector.py). SGLang has no start-up timeout that fires before the
# launcher's deadline: --dist-timeout (default: torch's) bounds every collective, not only start-up,
# so it is left alone; the 120 s warm-up wait (srt/entrypoints/http_server.py _wait_and_warmup) begins
# only once the model is loaded.
TOKEN_COUNTERS = ("sglang:generation_tokens_total", "sglang:prompt_tokens_total")

_OWNED = {
    **owned_flags(
        "it follows the LWS env; change the recipe's topology instead",
        "nnodes",
        "node-rank",
        "dist-init-addr",
        "nccl-init-addr",
    ),
    **owned_flags("set the pool's tensor_parallel in the recipe", "tp-size", "tensor-parallel-size", "tp"),
    **owned_flags("set the pool's port in the recipe", "port"),
    **owned_flags(
        "set model.path / model.served_name in the recipe", "model-path", "model", "served-model-name"
    ),
}


def build_sglang_plan(ctx: BuildContext, pool: SglangPool) -> Plan:
    role = ctx.role
    ctx.check_recipe_args(pool.args, _OWNED, "args", SGLANG_CATALOG)
    model = ctx.recipe.model_for(pool)
    leader = role.kind == RoleKind.LEADER
    args: list[Arg] = [*arg("model-path", model.path), *arg("served-model-name", model.served_name)]
    args += arg("tp-size", pool.tensor_parallel)
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
    args += args_from(pool.args)
    argv, notes = ctx.command(SGLANG, args, _OWNED, SGLANG_CATALOG)

    ports: list[PortSpec] = []
    if leader:
        ports.append(PortSpec(pool.port, "http"))
        if role.group_size > 1:
            ports.append(PortSpec(pool.dist_init_port, "dist-init"))
    engine = ProcessSpec(
        name="engine",
        argv=argv,
        env=ctx.env(ctx.recipe.env, pool.env),
        critical=True,
        ports=tuple(ports),
        health=HttpCheck(pool.port, "/health") if leader else None,
    )
    watch = ctx.progress_watch(
        [ProgressSource("engine", pool.port)], TOKEN_COUNTERS, model.served_name or model.path
    )
    return ctx.plan(
        [engine],
        notes=notes,
        model_path=model.path,
        leader_port=pool.port,
        progress="sglang",
        forward=watch,
    )
