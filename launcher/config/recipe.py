"""Recipe schema: the data a platform team writes to describe a model's pools and topology.

A recipe is YAML (built in under launcher/config/recipes/, or a mounted ConfigMap file) validated here.
Everything the launcher derives per pod (ranks, ports, addresses, topics, file paths) is left out
of the recipe; everything that is a fixed choice for the deployment (flags, JSON configs, env) is in it.

No `from __future__ import annotations` here: pydantic would compile every field's annotation back
from its string when each model class is created, on every `plan` and `run`.
"""

import json
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
    WithJsonSchema,
    field_validator,
    model_validator,
)

from launcher.contract.capabilities import VOCABULARY
from launcher.contract.plan import Parallelism
from launcher.contract.record import record
from launcher.contract.redact import is_secret_flag

Port = Annotated[int, Field(ge=1, le=65535)]
Count = Annotated[int, Field(ge=1)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
# One engine flag: true -> --flag, false -> --no-flag, null -> omitted, mapping -> one compact JSON
# argument, list -> the flag followed by each item, anything else -> its string form.
ArgValue = bool | int | float | str | None | dict[str, Any] | list[Any]
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # used with fullmatch
_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?")  # used with fullmatch


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


class BooleanWord(str):
    """An unquoted yes/no/on/off in a recipe file: YAML 1.1 reads it as a boolean; kept as the word
    written (launcher/config/recipe_yaml.py), so a number field that gets one echoes it."""

    def as_bool(self) -> bool:
        return self.lower() in ("yes", "on")


def _booleans(value: Any) -> Any:
    """An engine flag's value with YAML 1.1's yes/no/on/off as the booleans they always meant."""
    if isinstance(value, BooleanWord):
        return value.as_bool()
    if isinstance(value, list):
        return [_booleans(v) for v in value]
    if isinstance(value, dict):
        return {k: _booleans(v) for k, v in value.items()}
    return value


def _check_args(args: dict[str, Any]) -> dict[str, ArgValue]:
    """Flag names without dashes, never a secret; values that render to argv and to strict JSON."""
    args = _booleans(args)
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

    port: Port = Field(5557, description="ZMQ port the pod's first local rank publishes on (rank r: port+r).")
    replay_port: Port | None = Field(
        None, description="ZMQ replay endpoint (first local rank; rank r: replay_port+r); none: no replay."
    )
    buffer_steps: Count | None = Field(
        None, description="Batches the publisher keeps for replay (vLLM's kv-events-config buffer_steps)."
    )
    hwm: Count | None = Field(None, description="The publisher's ZMQ send high-water mark (vLLM's hwm).")
    # The launcher's watcher (healthchecks/kvevents/):
    silence_seconds: Seconds = Field(
        60.0, description="No batch this long while requests are served: the events are silent."
    )
    readiness: bool = Field(
        False, description="Not ready while silent (KV events flowing once a request was served)."
    )


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
# Editors validate a recipe against the JSON Schema before parse_size sees it: both forms are allowed.
Size = Annotated[
    int,
    BeforeValidator(parse_size),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]}),
]


class CapabilitySpec(_Data):
    """One capability the pool promises (launcher/contract/capabilities.py); a bare name is required."""

    name: str = Field(description="A capability name (docs/probes-and-watchers.md lists them).")
    level: Literal["required", "expected", "off"] = Field(
        "required",
        description="required: gates readiness; expected: metric and alert only; off: drop a derived one.",
    )

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @field_validator("level", mode="before")
    @classmethod
    def _yaml_off(cls, level: Any) -> Any:
        return "off" if level is False else level  # YAML 1.1 reads a bare `off` as false

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in VOCABULARY:
            raise ValueError(f"{name!r} is not a capability: one of {', '.join(VOCABULARY)}")
        return name


class RouterSpec(_Data):
    """What the llm-d router in front of this pool expects of it (its Helm values). Checked when the
    recipe loads (ports, hash seed, block size flags) and at run time (the block_size of the engine's
    BlockStored events, which must equal block_size_tokens: llm-d/llm-d PR #2203)."""

    kv_events_port: Port | None = Field(
        None, description="The router's precise-prefix-cache-producer socketPort: must be kv_events.port."
    )
    hash_seed: str | None = Field(
        None, description="The router's hashSeed: must be the engine's PYTHONHASHSEED."
    )
    block_size_tokens: Count | None = Field(
        None,
        description="The router's blockSizeTokens: must be the engine's KV block (or page) size.",
    )
    render_port: Port | None = Field(
        None, description="The router's token-producer target: must be render.port (vllm launch render)."
    )
    readiness: bool = Field(
        False, description="Not ready while the engine's BlockStored events carry another block size."
    )


class NixlSpec(_Data):
    """NIXL handshake listener: vLLM binds side_channel_port + global DP rank. A pool whose
    args.kv-transfer-config names a NIXL connector gets this section with its defaults when it has
    none: without it vLLM advertises `localhost` as its side channel (vLLM 0.32.0 vllm/envs.py
    VLLM_NIXL_SIDE_CHANNEL_HOST), which no peer on another pod can reach."""

    side_channel_port: Port = Field(
        5600, description="VLLM_NIXL_SIDE_CHANNEL_PORT of global DP rank 0; rank r listens on port+r."
    )


class MooncakeStoreSpec(_Data):
    """vLLM MooncakeStoreConnector config, written per pod and pointed at by MOONCAKE_CONFIG_PATH."""

    config: dict[str, Any] = Field(
        description="The connector's JSON config as written to the file (needs master_server_address)."
    )
    file_name: str = Field(
        "mooncake-store.json", description="File name under LLMD_RUNTIME_DIR for that JSON config."
    )

    @field_validator("config")
    @classmethod
    def _needs_master(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value.get("master_server_address"):
            raise ValueError("needs master_server_address (host:port of mooncake_master's RPC)")
        return value


PreflightCheck = Literal[
    "network",
    "memory",
    "memlock",
    "checkpoint",
    "drafter",
    "packages",
    "rdma",
    "store-master",
]


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

    port: Port = Field(8089, description="Port `vllm launch render` listens on.")
    args: Args = Field({}, description="Extra flags of `vllm launch render` (name without dashes: value).")


TLS_FLAGS = ("secure-proxy", "secure-serving")  # the sidecar's TLS switch, old and new name


class DisaggSidecar(_Data):
    """llm-d-router-disagg-sidecar in front of the engine: port+i -> engine port+i."""

    binary: str = Field("llm-d-router-disagg-sidecar", description="The sidecar's executable.")
    port: Port = Field(8000, description="Port the sidecar serves on; the engine moves behind it.")
    kv_connector: str = Field("nixlv2", description="The sidecar's --kv-connector.")
    tls: bool = Field(
        False,
        description="Serve the sidecar's listener over TLS (its --secure-proxy, renamed --secure-serving "
        "in later releases, on by default upstream; the launcher passes it either way). Off: plain HTTP, "
        "and the launcher checks GET /health. On: the router must speak TLS to the pod, and the launcher "
        "checks that the port accepts a connection (the sidecar's /health answers 200 whatever the engine).",
    )
    args: Args = Field(
        {},
        description="Extra flags of the sidecar (name without dashes: value); secure-proxy or "
        "secure-serving here must equal tls.",
    )

    @model_validator(mode="after")
    def _one_tls_setting(self) -> "DisaggSidecar":
        """The launcher's check follows `tls`: a TLS flag in args that says otherwise would leave the
        sidecar serving one way and checked the other, and the pod never ready."""
        for name, value in self.args.items():
            said = str(value).lower()
            if flag_name(name) in TLS_FLAGS and said != str(self.tls).lower():
                raise ValueError(
                    f"args.{name} is {value!r} but tls is {self.tls}: set disagg_sidecar.tls (the launcher "
                    "passes --secure-proxy and checks the sidecar by it) and drop the flag from args"
                )
        return self


class EnginePool(_Data):
    """An engine spanning an LWS group; each engine's pool class adds its own fields."""

    # The engine flag that sets the KV block size, which the router's blockSizeTokens must equal.
    block_size_flag: ClassVar[str]

    nodes: Count = Field(1, description="Pods per LWS group (leaderWorkerTemplate.size).")
    replicas: Count = Field(1, description="LWS groups; informational, used by manifests.")
    gpus_per_node: Count | None = Field(None, description="Accelerator devices each pod holds.")
    model: ModelSpec | None = Field(None, description="This pool's model, when it differs from the recipe's.")
    args: Args = Field(
        {},
        description="Engine flags, names without dashes: true -> --flag, false -> --no-flag, null -> "
        "omitted, a mapping -> one JSON argument, a list -> the flag then each item.",
    )
    env: EnvMap = Field({}, description="Added to this pool's engine environment (string values).")
    engine_versions: str | None = Field(
        None,
        description="The engine releases this pool's flags were written for, a version specifier such "
        "as `>=0.32,<0.34`; preflight refuses an engine outside it.",
    )
    router: RouterSpec | None = Field(None, description="What the llm-d router in front of the pool expects.")
    capabilities: list[CapabilitySpec] = Field(
        [],
        description="Capabilities the pool promises besides those derived from the recipe (a name: "
        "required; {name, level}: required, expected or off); `plan` shows the whole list.",
    )

    tensor_parallel: Count | None = Field(None, description="Tensor-parallel size of one engine.")
    pipeline_parallel: Count | None = Field(
        None,
        description="Pipeline-parallel stages of one engine (vLLM --pipeline-parallel-size, SGLang "
        "--pp-size). Over several pods, TP stays within each pod and the stages go across the pods "
        "when TP x PP / nodes is a multiple of TP (docs/recipes.md).",
    )
    host: HostSpec = Field(default_factory=HostSpec, description="What preflight checks on the host.")

    @property
    def local_ranks(self) -> int:
        """Data-parallel ranks per pod; 1 when one engine spans the whole group."""
        return 1

    def parallelism(self) -> Parallelism:
        """The engine's layout over the group's pods; its devices_per_pod is what each pod holds."""
        return Parallelism(
            self.tensor_parallel or 1, self.pipeline_parallel or 1, self.local_ranks, self.nodes
        )

    @field_validator("capabilities", mode="before")
    @classmethod
    def _proposal_shape(cls, value: Any) -> Any:
        """llm-d's `requirements: {modelServer: {capabilities: [...]}}` (`recipes show --capabilities`)."""
        if isinstance(value, dict) and "requirements" in value:
            from launcher.contract.capabilities import from_requirements

            return [{"name": n, "level": level.value} for n, level in from_requirements(value).items()]
        return value

    @field_validator("engine_versions")
    @classmethod
    def _a_specifier(cls, value: str | None) -> str | None:
        if value is not None:
            # Imported here: only a recipe that states engine_versions pays for it (plan's start-up).
            from packaging.specifiers import InvalidSpecifier, SpecifierSet

            try:
                SpecifierSet(value)
            except InvalidSpecifier as exc:
                raise ValueError(f"is not a version specifier such as >=0.32,<0.34 ({exc})") from None
        return value

    @model_validator(mode="after")
    def _parallel_arithmetic(self) -> "EnginePool":
        layout = self.parallelism()
        if problem := layout.problem():
            raise ValueError(problem)
        if self.gpus_per_node is not None and self.gpus_per_node != layout.devices_per_pod:
            raise ValueError(f"gpus_per_node is {gpu_count_mismatch(self.gpus_per_node, layout)}")
        return self


def gpu_count_mismatch(per_pod: int, layout: Parallelism, whose: str = "") -> str:
    """What a pod holding `per_pod` devices lacks for the layout; for TP alone over several pods, the
    layout that likely was meant (TP within each pod, the pods as pipeline stages)."""
    needs = layout.devices_per_pod
    spread = f"{needs * layout.nodes} over {layout.nodes} pods" if layout.nodes > 1 else "one pod"
    message = f"{per_pod}, but {whose}{layout.words()} needs {needs} per pod ({spread})"
    if layout.local_dp == 1 and layout.pipeline == 1 and layout.nodes > 1 and per_pod == layout.tensor:
        message += (
            f"; for TP {layout.tensor} within each pod and the pods as pipeline stages, set "
            f"pipeline_parallel: {layout.nodes}"
        )
    return message


class VllmPool(EnginePool):
    block_size_flag = "block-size"
    kind: Literal["vllm"] = Field(description="The engine family: vLLM (`vllm serve`).")
    layout: Literal["multinode", "data-parallel"] = Field(
        "multinode",
        description="multinode: one engine spans the group, node 0 serves, others run --headless. "
        "data-parallel: each pod owns data_parallel_local DP ranks behind vLLM's DP supervisor "
        "(supervisor_port), or, in a single pod without one, behind vLLM's own API server.",
    )
    data_parallel_local: Count | None = Field(None, description="DP ranks per pod (layout data-parallel).")
    port: Port = Field(8000, description="API port (data-parallel with a supervisor: rank r's is port+r).")
    master_port: Port | None = Field(
        None,
        description="torch.distributed port of a multinode engine (--master-port; vLLM's default if unset).",
    )
    supervisor_port: Port | None = Field(
        None, description="vLLM's DP supervisor port, which serves the pod's /readyz (layout data-parallel)."
    )
    dp_rpc_port: Port | None = Field(
        None, description="--data-parallel-rpc-port across pods (data-parallel)."
    )
    api_servers: Count | None = Field(
        None,
        description="vLLM's hybrid load balancing (layout data-parallel, instead of supervisor_port): each "
        "pod serves its own DP ranks through this many API server processes on `port` "
        "(--data-parallel-hybrid-lb --api-server-count N); the router balances across pods.",
    )
    kv_events: KVEventsSpec | None = Field(None, description="Publish ZMQ KV-cache events, and watch them.")
    nixl: NixlSpec | None = Field(None, description="NIXL handshake listener (NixlConnector).")
    mooncake_store: MooncakeStoreSpec | None = Field(
        None, description="MooncakeStoreConnector config, written per pod (MOONCAKE_CONFIG_PATH)."
    )
    render: RenderSidecar | None = Field(None, description="Run `vllm launch render` beside the engine.")
    disagg_sidecar: DisaggSidecar | None = Field(
        None, description="Run the llm-d routing sidecar in front of the engine."
    )

    @model_validator(mode="before")
    @classmethod
    def _nixl_from_connector(cls, data: Any) -> Any:
        """A NIXL connector in args.kv-transfer-config and no `nixl:` section: the section's defaults
        (the pod's IP and a port per global DP rank), so the side channel is reachable and declared."""
        if isinstance(data, dict) and data.get("nixl") is None and names_nixl(data.get("args")):
            return {**data, "nixl": {}}
        return data

    @model_validator(mode="after")
    def _layout_fields(self) -> "VllmPool":
        if self.layout == "data-parallel":
            if not self.data_parallel_local or self.data_parallel_local < 2:
                raise ValueError("layout data-parallel needs data_parallel_local >= 2 (vLLM's DP supervisor)")
            if self.api_servers is not None and self.supervisor_port is not None:
                raise ValueError(
                    "api_servers (vLLM's hybrid load balancing) and supervisor_port (its DP supervisor) "
                    "are two ways to serve a pod's ranks: give one"
                )
            if self.supervisor_port is None and self.api_servers is None and self.nodes > 1:
                raise ValueError(
                    "layout data-parallel across pods needs supervisor_port (vLLM's DP supervisor) or "
                    "api_servers (its hybrid load balancing); without either, one pod with one API server "
                    "is the only shape"
                )
        elif any(v is not None for v in (self.data_parallel_local, self.supervisor_port, self.api_servers)):
            raise ValueError(
                "data_parallel_local, supervisor_port and api_servers belong to layout data-parallel"
            )
        return self

    @property
    def local_ranks(self) -> int:
        return self.data_parallel_local or 1


class SglangPool(EnginePool):
    block_size_flag = "page-size"
    kind: Literal["sglang"] = Field(description="The engine family: SGLang (`sglang.launch_server`).")
    port: Port = Field(30000, description="API port.")
    dist_init_port: Port = Field(20000, description="Port of the leader's --dist-init-addr (multinode).")
    disagg_sidecar: DisaggSidecar | None = Field(
        None, description="Run the llm-d routing sidecar in front of the engine (kv_connector sglang)."
    )
    kv_events: KVEventsSpec | None = Field(
        None,
        description="Publish ZMQ KV-cache events from the leader, and watch them (SGLang binds one "
        "publisher per pod without data-parallel attention).",
    )

    @model_validator(mode="after")
    def _one_publisher(self) -> "SglangPool":
        """SGLang publishes from attention-TP rank 0 of each DP rank on port + rank (SGLang 0.5.23
        srt/disaggregation/kv_events.py); the launcher models one publisher per pod."""
        dp_attention = {flag_name(k) for k, v in self.args.items() if v not in (None, False)}
        if self.kv_events is not None and "enable-dp-attention" in dp_attention:
            raise ValueError(
                "kv_events with enable-dp-attention: SGLang then publishes per DP rank, which the launcher "
                "does not model yet; drop one of them"
            )
        return self


class _ServicePool(_Data):
    @property
    def nodes(self) -> int:
        """A service is one pod, not an LWS group."""
        return 1


class MooncakeMasterPool(_ServicePool):
    kind: Literal["mooncake-master"] = Field(description="A Mooncake store master pod.")
    binary: str = Field("mooncake_master", description="The master's executable.")
    port: Port = Field(50051, description="RPC port.")
    metrics_port: Port = Field(9003, description="Metrics port, also its health check.")
    http_metadata_port: Port | None = Field(
        None, description="Serve the HTTP metadata server on this port (none: not served)."
    )
    args: Args = Field({}, description="Extra flags of the master (name without dashes: value).")
    env: EnvMap = Field({}, description="Added to the master's environment.")
    host: HostSpec = Field(default_factory=HostSpec, description="What preflight checks on the host.")


class MooncakeDonorPool(_ServicePool):
    kind: Literal["mooncake-donor"] = Field(description="A pod donating memory to the Mooncake store.")
    binary: str = Field("mooncake_client", description="The donor's executable.")
    master: str = Field(description="host:port of mooncake_master's RPC.")
    metadata_server: str = Field(
        description="The transfer engine's metadata server (e.g. http://host:port/metadata)."
    )
    protocol: str = Field("rdma", description="Transfer protocol: rdma (memory is pinned) or tcp.")
    device_names: str = Field("", description="RDMA devices to use, comma-separated (empty: all).")
    global_segment_size: str = Field(description="Memory donated to the pool, e.g. 500GB.")
    port: Port = Field(50052, description="RPC port.")
    http_port: Port = Field(9300, description="HTTP port, also its health check.")
    args: Args = Field({}, description="Extra flags of the donor (name without dashes: value).")
    env: EnvMap = Field({}, description="Added to the donor's environment.")
    host: HostSpec = Field(default_factory=HostSpec, description="What preflight checks on the host.")

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


class GuideSource(_Data):
    """The llm-d guide a recipe follows: what `llm-d-launcher recipes` lists, and where the golden tests
    (tests/unit/roles/test_golden_guides.py) read the guide's pods from."""

    name: str = Field(description="The llm-d guide (its directory under guides/), e.g. optimized-baseline.")
    accelerator: str = Field(description="The guide's accelerator variant, e.g. cpu, nvidia-gpu, tpu-v7.")
    manifests: list[str] = Field(
        min_length=1, description="The guide's model-server manifests in llm-d/llm-d this recipe plans."
    )
    commit: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{40}$",
        description="The llm-d/llm-d commit they were read at (none: read from the published docs).",
    )


class KvPeer(_Data):
    """A pool that exchanges KV with this file's pools but is written in another recipe file (deploy/
    mounts one pool per file, so an edit rolls only its pool): what they must agree on
    (kv_peer_mismatch). scripts/compile_recipes.py writes it into each such file from the whole recipe."""

    store: bool = Field(False, description="It shares the Mooncake store (mooncake_store).")
    nixl: bool = Field(False, description="It runs a NIXL side channel (nixl).")
    hash_seed: str | None = Field(None, description="Its PYTHONHASHSEED (none: unset).")
    block_size_flag: str = Field(description="Its engine's block (page) size flag, as in args.")
    block_size: ArgValue = Field(None, description="That flag's value in its args (none: not given).")
    model_path: str = Field(description="Its model.path.")


class Recipe(_Data):
    name: str = Field(description="The recipe's name (lowercase letters, digits, '-', '.'); LLMD_RECIPE.")
    description: str = Field("", description="What the recipe deploys, for people.")
    guide: GuideSource | None = Field(None, description="The llm-d guide the recipe follows, if any.")
    model: ModelSpec = Field(description="The model every pool serves unless it names its own.")
    default_pool: str = Field(description="The pool a pod runs when LLMD_POOL is not set.")
    env: EnvMap = Field({}, description="Added to every engine process of every pool.")
    pools: dict[str, Pool] = Field(
        min_length=1, description="The recipe's pools by name; `kind` picks the pool's schema."
    )
    launcher: dict[str, Any] = Field(
        {}, description="Defaults for launcher settings (LLMD_*, without prefix); env and CLI override."
    )
    kv_peers: dict[str, KvPeer] = Field(
        {},
        description="Pools of the same deployment in other recipe files that exchange KV with this "
        "file's pools: checked against them as if one recipe held them all (generated).",
    )

    @model_validator(mode="after")
    def _names(self) -> "Recipe":
        for name in (self.name, *self.pools):
            if not _NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a valid name (lowercase letters, digits, '-', '.')")
        if shared := sorted(set(self.kv_peers) & set(self.pools)):
            raise ValueError(f"kv_peers {shared} are pools of this recipe: list only pools of other files")
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

    @model_validator(mode="after")
    def _kv_transfer_peers(self) -> "Recipe":
        """Pools that hand KV to each other must agree on what makes a block the same block; each
        difference below fails the first request in a cluster, or worse, turns into silent misses."""
        if mismatch := kv_peer_mismatch(self):
            raise ValueError(mismatch)
        return self

    @model_validator(mode="after")
    def _one_store_protocol(self) -> "Recipe":
        if mismatch := store_protocol_mismatch(self):
            raise ValueError(mismatch)
        return self

    def model_for(self, pool: EnginePool) -> ModelSpec:
        return pool.model or self.model


NIXL_SECTION = "nixl"  # a pool's NIXL side-channel section (NixlSpec), as recipes and plans name it


def optional_spec(pool: object, name: str) -> Any:
    """A pool's optional section by field name (nixl, mooncake_store, kv_events, render), None when its
    engine's pool class has no such field: the checks below name no engine (docs/adding-an-engine.md)."""
    return getattr(pool, name, None)


@record
class KvConnector:
    """What the launcher knows of one vLLM KV connector, by its --kv-transfer-config `kv_connector`
    name. The one table (VLLM_CONNECTORS) sits beside VllmPool because the schema itself reads it (a
    NIXL connector gets a `nixl:` section); roles/engines/vllm.py reads the rest."""

    side_channel: bool = False  # runs NIXL's side-channel handshake listener
    module: tuple[str, str] | None = None  # (the module it imports, its distribution), checked at start
    counters: tuple[str, ...] = ()  # its KV-transfer counters on the API server's /metrics, relayed
    # Its kv_connector_extra_config key naming the transfer protocol, rdma unless set (an RDMA need).
    protocol_key: str | None = None


# vLLM 0.32.0 vllm/distributed/kv_transfer/kv_connector/factory.py. Modules: kv_connector/v1/mooncake/*
# imports mooncake.*, vllm/distributed/nixl_utils.py nixl. Counters: v1/nixl/stats.py NixlPromMetrics
# (failed transfers include handshake and notification failures), mooncake/store/metrics.py. Protocol:
# kv_connector/v1/mooncake/mooncake_connector.py (mooncake_protocol, rdma by default).
VLLM_CONNECTORS = {
    "NixlConnector": KvConnector(
        side_channel=True,
        module=("nixl", "nixl"),
        counters=(
            "vllm:nixl_num_failed_transfers_total",
            "vllm:nixl_num_failed_notifications_total",
            "vllm:nixl_num_kv_expired_reqs_total",
            "vllm:nixl_xfer_time_seconds_count",
        ),
    ),
    "NixlPullConnector": KvConnector(side_channel=True),
    "NixlPushConnector": KvConnector(side_channel=True),
    "MooncakeConnector": KvConnector(
        module=("mooncake", "mooncake-transfer-engine"), protocol_key="mooncake_protocol"
    ),
    "MooncakeStoreConnector": KvConnector(
        module=("mooncake", "mooncake-transfer-engine"),
        counters=("vllm:mooncake_store_operation_total", "vllm:mooncake_store_operation_failed_keys_total"),
    ),
}


def transfer_connectors(config: object) -> list[dict[str, Any]]:
    """A --kv-transfer-config (a mapping, or its JSON text) and, for a MultiConnector, each child."""
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return []
    if not isinstance(config, dict):
        return []
    extra = config.get("kv_connector_extra_config")
    children = extra.get("connectors", []) if isinstance(extra, dict) else []
    return [config, *(c for child in children or [] for c in transfer_connectors(child))]


def side_channel(connector: Mapping[str, Any]) -> bool:
    """Whether one connector of a --kv-transfer-config runs NIXL's side channel."""
    known = VLLM_CONNECTORS.get(str(connector.get("kv_connector")))
    return known is not None and known.side_channel


def names_nixl(args: object) -> bool:
    """Whether a pool's args (or an argv's --kv-transfer-config values) run a NIXL connector."""
    if not isinstance(args, dict):
        return False
    configs = [v for k, v in args.items() if isinstance(k, str) and flag_name(k) == "kv-transfer-config"]
    return any(side_channel(c) for v in configs for c in transfer_connectors(v))


def flag_name(name: str) -> str:
    """A flag as the engines spell it in args: no dashes, no value, dashes for underscores."""
    return name.lstrip("-").split("=", 1)[0].replace("_", "-")


def kv_peers(recipe: Recipe) -> dict[str, EnginePool]:
    """The pools that exchange KV: a NIXL side channel or the shared Mooncake store."""
    return {
        name: pool
        for name, pool in recipe.pools.items()
        if isinstance(pool, EnginePool)
        and (optional_spec(pool, "nixl") is not None or optional_spec(pool, "mooncake_store") is not None)
    }


def kv_identities(recipe: Recipe) -> dict[str, KvPeer]:
    """What each of the recipe's own KV-exchanging pools must agree on with the others (model_construct:
    the pools are validated already, and the dry-run builds no second validator, tests/unit/repo)."""
    return {
        name: KvPeer.model_construct(
            store=optional_spec(pool, "mooncake_store") is not None,
            nixl=optional_spec(pool, "nixl") is not None,
            hash_seed={**recipe.env, **pool.env}.get("PYTHONHASHSEED"),
            block_size_flag=pool.block_size_flag,
            block_size=pool.args.get(pool.block_size_flag),
            model_path=recipe.model_for(pool).path,
        )
        for name, pool in kv_peers(recipe).items()
    }


def kv_peer_mismatch(recipe: Recipe) -> str | None:
    """The first fact two KV-exchanging pools disagree on, or None:
    - PYTHONHASHSEED (pools sharing the store): the store's keys are block hashes seeded by it
      (vLLM 0.32.0 vllm/v1/core/kv_cache_utils.py init_none_hash), so another seed never hits;
    - the block size (args.block-size): the store's keys and the KV-event hashes are per block;
    - the model path (pools with NIXL): NIXL's compatibility hash includes the model string, so the
      handshake fails (vLLM 0.32.0 vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py).
    The recipe's kv_peers (pools written in other files) are checked as if they were its own."""
    peers = {
        **{f"pools.{n}": p for n, p in kv_identities(recipe).items()},
        **{f"kv_peers.{n}": p for n, p in recipe.kv_peers.items()},
    }
    store = {n: p for n, p in peers.items() if p.store}
    nixl = {n: p for n, p in peers.items() if p.nixl}
    blocks = "/".join(sorted({f"args.{p.block_size_flag}" for p in peers.values()}))
    facts: list[tuple[str, dict[str, object]]] = [
        ("PYTHONHASHSEED", {n: p.hash_seed for n, p in store.items()}),
        (blocks, {n: p.block_size for n, p in peers.items()}),
        ("model.path", {n: p.model_path for n, p in nixl.items()}),
    ]
    for what, values in facts:
        if len(set(map(repr, values.values()))) > 1:
            shown = ", ".join(f"{n}: {'unset' if v is None else repr(v)}" for n, v in values.items())
            return f"the pools that exchange KV disagree on {what} ({shown}): give them one value"
    return None


def store_protocol_mismatch(recipe: Recipe) -> str | None:
    """Pools that share a Mooncake master must share its transfer protocol: each store client installs
    exactly one transport (kvcache-ai/Mooncake mooncake-store/src/client_service.cpp,
    Client::InitTransferEngine), and a transfer to a segment takes the transport of that segment's
    protocol or fails with "Transport tcp not installed" (mooncake-transfer-engine/src/multi_transport.cpp,
    selectTransport). A TCP donor in an RDMA store is memory no engine can write or read."""
    protocols: dict[str, dict[str, str]] = {}  # master -> {setting: protocol}
    for name, pool in recipe.pools.items():
        if isinstance(pool, MooncakeDonorPool):
            protocols.setdefault(pool.master, {})[f"pools.{name}.protocol"] = pool.protocol
        elif (store := optional_spec(pool, "mooncake_store")) is not None:
            config = store.config
            setting = f"pools.{name}.mooncake_store.config.protocol"
            # vLLM's MooncakeStoreConnector defaults to rdma (vLLM 0.32.0 vllm/distributed/mooncake_store.py)
            protocols.setdefault(str(config["master_server_address"]), {})[setting] = str(
                config.get("protocol", "rdma")
            )
    for master, used in protocols.items():
        if len(set(used.values())) > 1:
            shown = ", ".join(f"{setting}: {protocol}" for setting, protocol in used.items())
            return (
                f"the pools of the Mooncake store at {master} use different protocols ({shown}): a client "
                "reaches a segment only over the segment's own protocol; give them one"
            )
    return None


def router_mismatch(pool: EnginePool, env: Mapping[str, str]) -> str | None:
    """The first way the pool's own settings contradict what its router expects, or None."""
    router = pool.router
    assert router is not None
    if router.kv_events_port is not None:
        events = optional_spec(pool, "kv_events")
        if events is None or events.port != router.kv_events_port:
            got = "no kv_events" if events is None else f"kv_events.port {events.port}"
            return f"the router reads KV events on :{router.kv_events_port} but the pool has {got}"
    if router.render_port is not None:
        render = optional_spec(pool, "render")
        if render is None or render.port != router.render_port:
            got = "no render sidecar" if render is None else f"render.port {render.port}"
            return f"the router's token producer targets :{router.render_port} but the pool has {got}"
    if router.hash_seed is not None and env.get("PYTHONHASHSEED") != router.hash_seed:
        seed = env.get("PYTHONHASHSEED")
        return f"the router hashes with seed {router.hash_seed!r} but PYTHONHASHSEED is {seed!r}"
    flag = pool.block_size_flag
    block = pool.args.get(flag)
    expected = router.block_size_tokens
    if expected is not None and block is not None and as_engine_int(block) != expected:
        return f"the router's blockSizeTokens is {expected} but args.{flag} is {block}"
    return None


def as_engine_int(value: ArgValue) -> int | None:
    """The integer an engine's parser (argparse, type=int) reads from the flag's argv token, whether
    the recipe wrote 16 or "16"; None when it reads none (16.0, true)."""
    if isinstance(value, (bool, float, dict, list)):
        return None
    try:
        return int(str(value))
    except ValueError:
        return None


def json_schema() -> dict[str, Any]:
    """The recipe as JSON Schema, from the models and their field descriptions: what `llm-d-launcher
    recipes schema` prints, so editors validate a recipe as it is written."""
    schema = _branch_on_kind(Recipe.model_json_schema())
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "llm-d-launcher recipe",
        **{k: v for k, v in schema.items() if k != "title"},
    }


def _branch_on_kind(node: Any) -> Any:
    """pydantic writes a tagged union as `oneOf` plus OpenAPI's `discriminator`, which JSON Schema does
    not know: a validator then tries every branch and reports that none matched (`kind: vLLM` got no
    word about kind). Standard JSON Schema instead: `kind` must be one of the tags, and `if` it is a
    tag `then` that branch's schema applies, so the error names what is wrong."""
    if isinstance(node, list):
        return [_branch_on_kind(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _branch_on_kind(value) for key, value in node.items()}
    tagged = node.pop("discriminator", None)
    if tagged is None:
        return node
    key = tagged["propertyName"]
    by_ref = {ref: tag for tag, ref in tagged["mapping"].items()}
    mapping = {by_ref[branch["$ref"]]: branch["$ref"] for branch in node.pop("oneOf")}  # union order
    return {
        **node,
        "type": "object",
        "required": [key],
        "properties": {key: {"enum": list(mapping)}},
        "allOf": [
            {"if": {"properties": {key: {"const": tag}}, "required": [key]}, "then": {"$ref": ref}}
            for tag, ref in mapping.items()
        ],
    }
