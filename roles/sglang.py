"""SGLang multi-host pods (e.g. one TPU slice per LWS group): the same command on every host,
--node-rank = LWS_WORKER_INDEX, the HTTP API only on the leader."""

from __future__ import annotations

from launcher.addresses import host_port
from launcher.config.recipe import SglangPool
from launcher.plan import HttpCheck, Plan, PortSpec, ProcessSpec, RoleKind
from roles.args import Arg, arg, args_from
from roles.context import BuildContext, owned_flags

SGLANG = ["python3", "-m", "sglang.launch_server"]
SGLANG_CATALOG = "sglang-server"

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
    return ctx.plan([engine], notes=notes, model_path=model.path, leader_port=pool.port, progress="sglang")
