"""Recipe schema: the data a platform team writes to describe a model's pools and topology.

A recipe is YAML (built in under launcher/config/recipes/, or a mounted ConfigMap file) validated here.
Everything the launcher derives per pod (ranks, ports, addresses, topics, file paths) is left out
of the recipe; everything that is a fixed choice for the deployment (flags, JSON configs, env) is in it.

No `from __future__ import annotations` here: pydantic would compile every field's annotation back
from its string when each model class is created, on every `plan` and `run`.
"""

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from launcher.contract.redact import is_secret_flag

Port = Annotated[int, Field(ge=1, le=65535)]
Count = Annotated[int, Field(ge=1)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
# One engine flag: true -> --flag, false -> --no-flag, null -> omitted, mapping -> one compact JSON
# argument, list -> the flag followed by each item, anything else -> its string form.
ArgValue = bool | int | float | str | None | dict[str, Any] | list[Any]
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")


def _plain(value: object) -> bool:
    """JSON data exactly: what renders the same on argv and inside a JSON argument."""
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _check_args(args: dict[str, Any]) -> dict[str, ArgValue]:
    """Flag names without dashes, never a secret; values that render to argv and to strict JSON."""
    for flag, value in args.items():
        if flag.startswith("-"):
            raise ValueError(f"flag names are written without dashes: {flag!r} -> {flag.lstrip('-')!r}")
        if is_secret_flag(flag):
            raise ValueError(
                f"{flag!r} would put a secret on the command line; pass it in the env from a Secret"
            )
        if not _plain(value):
            raise ValueError(
                f"{flag}: the value is not a string, number, boolean, null, list or mapping with string keys "
                "(NaN and infinity are not allowed)"
            )
        # The engine parses every word on its argv: an item `--hf-token` (or `--api-key=...`) inside
        # another flag's value would be read as that flag.
        words = value if isinstance(value, list) else [value]
        if any(isinstance(w, str) and w.startswith("-") and is_secret_flag(w) for w in words):
            raise ValueError(f"{flag}: a value holds a secret flag; pass the secret in the env from a Secret")
    return args


def _check_env(env: dict[str, Any]) -> dict[str, str]:
    """Env names a shell and `env` accept; numbers become strings, booleans must be quoted."""
    out = {}
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            shown = repr(str(name)[:64])
            raise ValueError(f"{shown} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f'{name}: give the value as a quoted string, e.g. {name}: "1"')
        if "\0" in str(value):
            raise ValueError(f"{name}: the value holds a NUL byte, which no environment can carry")
        out[name] = str(value)
    return out


Args = Annotated[dict[str, Any], AfterValidator(_check_args)]
EnvMap = Annotated[dict[str, Any], AfterValidator(_check_env)]


class _Data(BaseModel):
    """defer_build: a model's validator is built when it is first used, not when the module is
    imported; `Recipe` validation builds one validator for the whole tree, instead of one per class."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class ModelSpec(_Data):
    path: str = Field(description="What the engine loads: a local path on the model volume, or a hub id.")
    served_name: str | None = Field(None, description="Name clients and the router use (default: path).")

    @property
    def name(self) -> str:
        return self.served_name or self.path


class KVEventsSpec(_Data):
    """ZMQ KV-cache events. Each pod's first local rank publishes on `port`, rank r on port+r."""

    port: Port = 5557
    replay_port: Port | None = None
    buffer_steps: Count | None = None
    hwm: Count | None = None
    # The launcher's watcher (healthchecks/kvevents/):
    silence_seconds: Seconds = 60.0  # no batch this long while requests are served = silent
    readiness: bool = False  # not ready while silent ("KV events flowing once a request was served")


def parse_size(value: str | int) -> int:
    """Bytes in a size the way vLLM's MooncakeStoreConnector reads global_segment_size (vLLM 0.32.0
    vllm/distributed/mooncake_store.py, _parse_size: GB, MB, KB are powers of 1024); GiB, MiB, KiB,
    Gi, Mi, Ki are accepted too, with the same meaning."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE.fullmatch(str(value).strip().lower())
    if not match:
        raise ValueError(f"{str(value)[:32]!r} is not a size (e.g. 160GB, 64GiB, 512Mi)")
    return int(float(match[1]) * _UNITS[match[2] or "b"])


_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(gib|mib|kib|gi|mi|ki|gb|mb|kb|b)?")
_UNITS = {"gib": 1 << 30, "gi": 1 << 30, "gb": 1 << 30, "mib": 1 << 20, "mi": 1 << 20, "mb": 1 << 20,
          "kib": 1 << 10, "ki": 1 << 10, "kb": 1 << 10, "b": 1}  # fmt: skip
Size = Annotated[int, BeforeValidator(parse_size)]


class RouterSpec(_Data):
    """What the llm-d router in front of this pool expects of it (its Helm values). Checked when the
    recipe loads (ports, hash seed, block size flags) and at run time (the block_size of the engine's
    BlockStored events, which must equal block_size_tokens: llm-d/llm-d PR #2203)."""

    kv_events_port: Port | None = None  # precise-prefix-cache-producer's ZMQ socketPort
    hash_seed: str | None = None  # its hashSeed: the engine's PYTHONHASHSEED
    block_size_tokens: Count | None = None  # its blockSizeTokens: the engine's KV block / page size
    render_port: Port | None = None  # token-producer's target (vllm launch render)
    readiness: bool = False  # not ready while the engine's block size differs from block_size_tokens


class NixlSpec(_Data):
    """NIXL handshake listener: vLLM binds side_channel_port + global DP rank."""

    side_channel_port: Port = 5600


class MooncakeStoreSpec(_Data):
    """vLLM MooncakeStoreConnector config, written per pod and pointed at by MOONCAKE_CONFIG_PATH."""

    config: dict[str, Any]
    file_name: str = "mooncake-store.json"

    @field_validator("config")
    @classmethod
    def _needs_master(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value.get("master_server_address"):
            raise ValueError("needs master_server_address (host:port of mooncake_master's RPC)")
        return value


PreflightCheck = Literal["network", "memory", "memlock", "checkpoint", "drafter", "packages"]


class HostSpec(_Data):
    """What the preflight checks on the host a pod lands on (docs/preflight.md)."""

    engine_memory: Size | None = Field(
        None,
        description="Host RAM the processes need besides the Mooncake segments (e.g. 96GiB): the "
        "memory preflight and the manifests' memory limits count it.",
    )
    shm: Size = Field(0, description="/dev/shm (a memory-backed emptyDir, charged to the pod).")
    advisory: list[PreflightCheck] = Field(
        [], description="Checks that only warn (log and plan) instead of refusing to start."
    )


class RenderSidecar(_Data):
    """`vllm launch render` beside the serving node (token producer for the router)."""

    port: Port = 8089
    args: Args = {}


class DisaggSidecar(_Data):
    """llm-d-router-disagg-sidecar in front of the engine: port+i -> engine port+i."""

    binary: str = "llm-d-router-disagg-sidecar"
    port: Port = 8000
    kv_connector: str = "nixlv2"
    args: Args = {}


class EnginePool(_Data):
    """An engine spanning an LWS group; each engine's pool class adds its own fields."""

    # The engine flag that sets the KV block size, which the router's blockSizeTokens must equal.
    block_size_flag: ClassVar[str]

    nodes: Count = Field(1, description="Pods per LWS group (leaderWorkerTemplate.size).")
    replicas: Count = Field(1, description="LWS groups; informational, used by manifests.")
    gpus_per_node: Count | None = Field(None, description="Accelerator devices each pod holds.")
    model: ModelSpec | None = None
    args: Args = {}
    env: EnvMap = {}
    router: RouterSpec | None = None

    tensor_parallel: Count | None = None
    host: HostSpec = Field(default_factory=HostSpec)

    @property
    def local_ranks(self) -> int:
        """Data-parallel ranks per pod; 1 when one engine spans the whole group."""
        return 1

    def devices_per_pod(self) -> tuple[int, str]:
        """Accelerator devices one pod drives, and how that number comes about."""
        tp = self.tensor_parallel or 1
        if self.local_ranks > 1:
            return tp * self.local_ranks, f"TP {tp} x {self.local_ranks} local DP ranks"
        return tp // self.nodes, f"TP {tp} over {self.nodes} pods"

    @model_validator(mode="after")
    def _parallel_arithmetic(self) -> "EnginePool":
        tp = self.tensor_parallel or 1
        if self.local_ranks == 1 and tp % self.nodes:
            raise ValueError(f"tensor_parallel {tp} must be a multiple of nodes {self.nodes}")
        devices, why = self.devices_per_pod()
        if self.gpus_per_node is not None and self.gpus_per_node != devices:
            raise ValueError(f"gpus_per_node is {self.gpus_per_node} but the pool needs {devices} ({why})")
        return self


class VllmPool(EnginePool):
    block_size_flag = "block-size"
    kind: Literal["vllm"]
    layout: Literal["multinode", "data-parallel"] = Field(
        "multinode",
        description="multinode: one engine spans the group, node 0 serves, others run --headless. "
        "data-parallel: each pod owns data_parallel_local DP ranks behind vLLM's DP supervisor "
        "(supervisor_port), or, in a single pod without one, behind vLLM's own API server.",
    )
    data_parallel_local: Count | None = None
    port: Port = 8000
    master_port: Port | None = None
    supervisor_port: Port | None = None
    dp_rpc_port: Port | None = None
    kv_events: KVEventsSpec | None = None
    nixl: NixlSpec | None = None
    mooncake_store: MooncakeStoreSpec | None = None
    render: RenderSidecar | None = None
    disagg_sidecar: DisaggSidecar | None = None

    @model_validator(mode="after")
    def _layout_fields(self) -> "VllmPool":
        if self.layout == "data-parallel":
            if not self.data_parallel_local or self.data_parallel_local < 2:
                raise ValueError("layout data-parallel needs data_parallel_local >= 2 (vLLM's DP supervisor)")
            if self.supervisor_port is None and self.nodes > 1:
                raise ValueError(
                    "layout data-parallel across pods needs supervisor_port (vLLM's DP supervisor); "
                    "without it, one pod with one API server is the only shape"
                )
        elif self.data_parallel_local is not None or self.supervisor_port is not None:
            raise ValueError("data_parallel_local and supervisor_port belong to layout data-parallel")
        return self

    @property
    def local_ranks(self) -> int:
        return self.data_parallel_local or 1


class SglangPool(EnginePool):
    block_size_flag = "page-size"
    kind: Literal["sglang"]
    port: Port = 30000
    dist_init_port: Port = 20000


class _ServicePool(_Data):
    @property
    def nodes(self) -> int:
        """A service is one pod, not an LWS group."""
        return 1


class MooncakeMasterPool(_ServicePool):
    kind: Literal["mooncake-master"]
    binary: str = "mooncake_master"
    port: Port = 50051
    metrics_port: Port = 9003
    http_metadata_port: Port | None = None
    args: Args = {}
    env: EnvMap = {}
    host: HostSpec = Field(default_factory=HostSpec)


class MooncakeDonorPool(_ServicePool):
    kind: Literal["mooncake-donor"]
    binary: str = "mooncake_client"
    master: str = Field(description="host:port of mooncake_master's RPC.")
    metadata_server: str
    protocol: str = "rdma"
    device_names: str = ""
    global_segment_size: str = Field(description="Memory donated to the pool, e.g. 500GB.")
    port: Port = 50052
    http_port: Port = 9300
    args: Args = {}
    env: EnvMap = {}
    host: HostSpec = Field(default_factory=HostSpec)

    @field_validator("global_segment_size")
    @classmethod
    def _a_size(cls, value: str) -> str:
        parse_size(value)
        return value


Pool = Annotated[VllmPool | SglangPool | MooncakeMasterPool | MooncakeDonorPool, Field(discriminator="kind")]
# Each pool class's `kind`, the discriminator pydantic names in an error's location.
POOL_KINDS: tuple[str, ...] = tuple(
    kind for cls in get_args(get_args(Pool)[0]) for kind in get_args(cls.model_fields["kind"].annotation)
)


class Recipe(_Data):
    name: str
    description: str = ""
    model: ModelSpec
    default_pool: str
    env: EnvMap = Field({}, description="Added to every engine process of every pool.")
    pools: dict[str, Pool] = Field(min_length=1)
    launcher: dict[str, Any] = Field(
        {}, description="Defaults for launcher settings (LLMD_*, without prefix); env and CLI override."
    )

    @model_validator(mode="after")
    def _names(self) -> "Recipe":
        for name in (self.name, *self.pools):
            if not _NAME.match(name):
                raise ValueError(f"{name!r} is not a valid name (lowercase letters, digits, '-', '.')")
        if self.default_pool not in self.pools:
            raise ValueError(
                f"default_pool {self.default_pool!r} is not one of the pools {sorted(self.pools)}"
            )
        return self

    @model_validator(mode="after")
    def _router_contract(self) -> "Recipe":
        """What the recipe alone shows of the router's contract; the engine's real block size is
        checked at run time (healthchecks/kvevents/)."""
        for name, pool in self.pools.items():
            if not isinstance(pool, EnginePool) or pool.router is None:
                continue
            if mismatch := router_mismatch(pool, {**self.env, **pool.env}):
                raise ValueError(f"pools.{name}.router: {mismatch}")
        return self

    def model_for(self, pool: EnginePool) -> ModelSpec:
        return pool.model or self.model


def router_mismatch(pool: EnginePool, env: Mapping[str, str]) -> str | None:
    """The first way the pool's own settings contradict what its router expects, or None."""
    router = pool.router
    assert router is not None
    if router.kv_events_port is not None:
        events = pool.kv_events if isinstance(pool, VllmPool) else None
        if events is None or events.port != router.kv_events_port:
            got = "no kv_events" if events is None else f"kv_events.port {events.port}"
            return f"the router reads KV events on :{router.kv_events_port} but the pool has {got}"
    if router.render_port is not None:
        render = pool.render if isinstance(pool, VllmPool) else None
        if render is None or render.port != router.render_port:
            got = "no render sidecar" if render is None else f"render.port {render.port}"
            return f"the router's token producer targets :{router.render_port} but the pool has {got}"
    if router.hash_seed is not None and env.get("PYTHONHASHSEED") != router.hash_seed:
        seed = env.get("PYTHONHASHSEED")
        return f"the router hashes with seed {router.hash_seed!r} but PYTHONHASHSEED is {seed!r}"
    flag = pool.block_size_flag
    block = pool.args.get(flag)
    if router.block_size_tokens is not None and block is not None and block != router.block_size_tokens:
        return f"the router's blockSizeTokens is {router.block_size_tokens} but args.{flag} is {block}"
    return None
