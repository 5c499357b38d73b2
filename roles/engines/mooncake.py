"""Mooncake store services: the master (RPC + embedded HTTP metadata server) and DRAM donors, one
family (MOONCAKE, at the end) with two pool kinds."""

from __future__ import annotations

from launcher.config.recipe import Args, MooncakeDonorPool, MooncakeMasterPool
from launcher.contract.plan import HttpCheck, MemoryItem, Plan, PortSpec, ProcessSpec, RdmaNeed, StoreMaster
from roles.args import args_from
from roles.context import BuildContext, owned_flags
from roles.engines.family import EngineFamily
from roles.sizes import size_of

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


# Mooncake's transfer engine reads the RoCE GID index from MC_GID_INDEX (mooncake-transfer-engine
# src/config.cpp); a store client's JSON config is named by MOONCAKE_CONFIG_PATH (vLLM 0.32.0
# vllm/distributed/mooncake_store.py).
MOONCAKE_GID_ENV = ("MC_GID_INDEX",)
MOONCAKE_CONFIG_ENV = "MOONCAKE_CONFIG_PATH"
DEVICE_NAMES_FLAG = "--device_names="  # mooncake_client's gflag; empty: its own discovery


def rdma_use(pool: MooncakeMasterPool | MooncakeDonorPool, where: str) -> RdmaNeed | None:
    """A donor names its HCAs with --device_names; protocol rdma cannot work without one. Its NICs must be
    its own: a NIC an engine pod claims is in that pod's network namespace (GKE DRANET), not the donor's.
    tcp is a fix only for the whole store (the recipe refuses a mix: store_protocol_mismatch)."""
    if not isinstance(pool, MooncakeDonorPool):
        return None
    required = pool.protocol == "rdma"
    return RdmaNeed(
        env=MOONCAKE_GID_ENV,
        required_by=f"{where}.protocol rdma" if required else None,
        fix="give the donor RDMA NICs of its own (a resource claim no engine pod holds), or set "
        f"{where}.protocol to tcp together with every pool of its store",
        device_flag=DEVICE_NAMES_FLAG,
    )


def mooncake_master(rpc: str, metadata_server: str, setting: str, *, reregister: bool) -> StoreMaster:
    return StoreMaster(
        name="mooncake master",
        rpc=rpc,
        metadata_server=metadata_server if metadata_server.startswith("http") else None,
        setting=setting,
        fix=f"start the mooncake-master pool (its Deployment and Service) before the pools that use it, or "
        f"correct {setting} (now {rpc})",
        reregister=reregister,
    )


def donor_master(pool: MooncakeMasterPool | MooncakeDonorPool, where: str) -> StoreMaster | None:
    """A donor registers its segment with the master. A restarted master forgets the segment and its
    transfer metadata (its embedded HTTP metadata server comes back empty, kvcache-ai/Mooncake#2246,
    where running clients stayed unreadable until restarted; #1336: restart the client). The donor
    restarts, so a new client registers. (0.3.13.post1 over TCP: a running mooncake_client also
    mounts its segment again and re-publishes its metadata by itself, 4 to 9 s after the kill against
    3.5 s for the restart, measured in the group tier with this exit turned off.)"""
    if not isinstance(pool, MooncakeDonorPool):
        return None
    return mooncake_master(pool.master, pool.metadata_server, f"{where}.master", reregister=True)


MOONCAKE = EngineFamily[MooncakeMasterPool | MooncakeDonorPool](
    name="mooncake",
    pools=(MooncakeMasterPool, MooncakeDonorPool),
    build=build_service_plan,
    host_memory=host_memory,
    rdma=rdma_use,
    store_master=donor_master,
    env_prefixes=("MOONCAKE", "MC"),  # MOONCAKE_CONFIG_PATH, MC_GID_INDEX and the transfer engine's MC_*
)
