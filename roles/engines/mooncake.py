"""Mooncake store services: the master (RPC + embedded HTTP metadata server) and DRAM donors, one
family (MOONCAKE, at the end) with two pool kinds."""

from __future__ import annotations

from launcher.config.recipe import Args, MooncakeDonorPool, MooncakeMasterPool
from launcher.contract.plan import HttpCheck, MemoryItem, Plan, PortSpec, ProcessSpec
from roles.args import args_from
from roles.context import BuildContext, owned_flags
from roles.engines.family import EngineFamily
from roles.memory import size_of

_MASTER_OWNED = owned_flags(
    "set it in the recipe's mooncake-master pool",
    "port",
    "rpc-port",
    "metrics-port",
    "http-metadata-server-port",
)
_DONOR_OWNED = owned_flags("set it in the recipe's mooncake-donor pool", "host", "port", "http-port")


def build_master_plan(ctx: BuildContext, pool: MooncakeMasterPool) -> Plan:
    ctx.check_recipe_args(pool.args, _MASTER_OWNED, "args")
    flags: Args = {"port": pool.port}
    ports = [PortSpec(pool.port, "rpc"), PortSpec(pool.metrics_port, "metrics")]
    if pool.http_metadata_port is not None:
        flags |= {"enable_http_metadata_server": True, "http_metadata_server_port": pool.http_metadata_port}
        ports.append(PortSpec(pool.http_metadata_port, "http-metadata"))
    flags |= {**pool.args, "metrics_port": pool.metrics_port}
    return _service_plan(
        ctx, "mooncake-master", pool.binary, flags, _MASTER_OWNED, ports, pool.metrics_port, pool.env
    )


def build_donor_plan(ctx: BuildContext, pool: MooncakeDonorPool) -> Plan:
    ctx.check_recipe_args(pool.args, _DONOR_OWNED, "args")
    flags: Args = {
        "host": ctx.pod.pod_ip,  # the address the donated segment is registered under
        "port": pool.port,
        "master_server_address": pool.master,
        "metadata_server": pool.metadata_server,
        "protocol": pool.protocol,
        "device_names": pool.device_names,
        "global_segment_size": pool.global_segment_size,
        "enable_http_server": True,  # its /health exists only with the HTTP server on
        "http_port": pool.http_port,
        **pool.args,
    }
    ports = [PortSpec(pool.port, "rpc"), PortSpec(pool.http_port, "http")]
    return _service_plan(
        ctx, "mooncake-donor", pool.binary, flags, _DONOR_OWNED, ports, pool.http_port, pool.env
    )


def _service_plan(
    ctx: BuildContext,
    name: str,
    binary: str,
    flags: Args,
    owned: dict[str, str],
    ports: list[PortSpec],
    health_port: int,
    env: dict[str, str],
) -> Plan:
    """One critical gflags binary whose /health is served on health_port."""
    argv, notes = ctx.command([binary], args_from(flags, style="gflags"), owned)
    process = ProcessSpec(
        name=name,
        argv=argv,
        env=ctx.env(env),
        critical=True,
        ports=tuple(ports),
        health=HttpCheck(health_port, "/health"),
    )
    return ctx.plan([process], notes=notes)


def build_service_plan(ctx: BuildContext, pool: MooncakeMasterPool | MooncakeDonorPool) -> Plan:
    if isinstance(pool, MooncakeMasterPool):
        return build_master_plan(ctx, pool)
    return build_donor_plan(ctx, pool)


def host_memory(pool: MooncakeMasterPool | MooncakeDonorPool, where: str) -> list[MemoryItem]:
    """A donor mounts its global_segment_size (pinned when registered for RDMA); a master given one
    in its args allocates it."""
    if isinstance(pool, MooncakeDonorPool):
        size = size_of(pool.global_segment_size, f"{where}.global_segment_size")
        return [MemoryItem("mooncake donor segment", size, 1, pool.protocol == "rdma")]
    if "global_segment_size" in pool.args:
        size = size_of(pool.args["global_segment_size"], f"{where}.args.global_segment_size")
        return [MemoryItem("mooncake master segment", size, 1, False)]
    return []


MOONCAKE = EngineFamily[MooncakeMasterPool | MooncakeDonorPool](
    name="mooncake",
    pools=(MooncakeMasterPool, MooncakeDonorPool),
    build=build_service_plan,
    host_memory=host_memory,
)
