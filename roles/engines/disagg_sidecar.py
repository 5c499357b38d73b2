"""llm-d's routing sidecar (llm-d-router-disagg-sidecar) in front of an engine, as a process of the
pod: the llm-d guides run it as a native sidecar container of the decode pod, with the same flags.
Shared by the engines whose decode pods it fronts (vLLM, SGLang)."""

from __future__ import annotations

from collections.abc import Sequence

from launcher.config.recipe import TLS_FLAGS, DisaggSidecar, flag_name
from launcher.contract.plan import HttpCheck, PortSpec, ProcessSpec, TcpCheck
from roles import topology
from roles.args import args_from, flatten
from roles.context import BuildContext, owned_flags

SIDECAR_OWNED = owned_flags(
    "set the pool's disagg_sidecar / port / data_parallel_local in the recipe",
    "port", "model-server-port", "vllm-port", "data-parallel-size", "kv-connector",
)  # fmt: skip


def disagg_sidecar(
    sidecar: DisaggSidecar, engine_port: int, ranks: Sequence[int], ctx: BuildContext
) -> ProcessSpec:
    """The sidecar fronting one API port per rank in `ranks` (sidecar port + i -> engine port + i)."""
    args = {
        "port": sidecar.port,
        "model-server-port": engine_port,
        "data-parallel-size": len(ranks),
        "kv-connector": sidecar.kv_connector,
        **sidecar.args,
    }
    # TLS is on by default upstream (llm-d/llm-d-router pkg/sidecar/proxy/options.go: SecureServing
    # true; --secure-proxy its deprecated alias, the only name in llm-d-routing-sidecar v0.3.0), so it
    # is always said: a sidecar serving TLS to a plain-HTTP check never becomes ready. A recipe that
    # names it in args (the guides' --secure-serving) already says the same as tls (DisaggSidecar).
    if not any(flag_name(name) in TLS_FLAGS for name in sidecar.args):
        args["secure-proxy"] = sidecar.tls
    # Go's flag package needs --flag=value for booleans; use that form for every flag.
    argv = (sidecar.binary, *flatten(args_from(args, style="gflags")))
    ports = topology.local_rank_ports(sidecar.port, len(ranks))
    return ProcessSpec(
        name="disagg-sidecar",
        argv=argv,
        env=ctx.env(),
        critical=False,
        ports=tuple(PortSpec(p, f"sidecar-rank{r}") for r, p in zip(ranks, ports, strict=True)),
        health=TcpCheck("127.0.0.1", sidecar.port) if sidecar.tls else HttpCheck(sidecar.port, "/health"),
    )
