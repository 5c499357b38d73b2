"""Recipe schema: the data a platform team writes to describe a model's pools and topology.

A recipe is YAML (built in under launcher/config/recipes/, or a mounted ConfigMap file) validated here.
Everything the launcher derives per pod (ranks, ports, addresses, topics, file paths) is left out
of the recipe; everything that is a fixed choice for the deployment (flags, JSON configs, env) is in it.

No `from __future__ import annotations` here: pydantic would compile every field's annotation back
from its string when each model class is created, on every `plan` and `run`.
"""

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from launcher.errors import ConfigError, Problem
from launcher.redact import is_secret_flag

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
    # The launcher's watcher (healthchecks/kvevents.py):
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
    """What the preflight checks on the host a pod lands on (README "Preflight")."""

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


class _EnginePool(_Data):
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
    def _parallel_arithmetic(self) -> "_EnginePool":
        tp = self.tensor_parallel or 1
        if self.local_ranks == 1 and tp % self.nodes:
            raise ValueError(f"tensor_parallel {tp} must be a multiple of nodes {self.nodes}")
        devices, why = self.devices_per_pod()
        if self.gpus_per_node is not None and self.gpus_per_node != devices:
            raise ValueError(f"gpus_per_node is {self.gpus_per_node} but the pool needs {devices} ({why})")
        return self


class VllmPool(_EnginePool):
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


class SglangPool(_EnginePool):
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
        checked at run time (healthchecks/kvevents.py)."""
        for name, pool in self.pools.items():
            engine = isinstance(pool, (VllmPool, SglangPool)) and pool.router is not None
            if engine and (mismatch := router_mismatch(pool, {**self.env, **pool.env})):  # type: ignore[arg-type]
                raise ValueError(f"pools.{name}.router: {mismatch}")
        return self

    def model_for(self, pool: VllmPool | SglangPool) -> ModelSpec:
        return pool.model or self.model


# The engine flag that sets the KV block size the router's blockSizeTokens must equal.
BLOCK_SIZE_FLAG = {"vllm": "block-size", "sglang": "page-size"}


def router_mismatch(pool: VllmPool | SglangPool, env: Mapping[str, str]) -> str | None:
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
    flag = BLOCK_SIZE_FLAG[pool.kind]
    block = pool.args.get(flag)
    if router.block_size_tokens is not None and block is not None and block != router.block_size_tokens:
        return f"the router's blockSizeTokens is {router.block_size_tokens} but args.{flag} is {block}"
    return None


MAX_RECIPE_BYTES = 1 << 20  # a recipe is a page of YAML; a ConfigMap holds at most 1 MiB
_MAX_NODES = 100_000  # values after alias expansion: a "billion laughs" file is refused, not expanded
_MAX_DEPTH = 64  # nesting; deeper would only exhaust the parser's and the validators' recursion


class _RecipeLoader(yaml.CSafeLoader):  # libyaml: a tenth of the pure-Python parse time
    """Safe YAML that refuses duplicate keys (in a ConfigMap the last one silently winning hides
    typos) and keeps dates as text (2026-01-01 is a string to an engine flag, not a date)."""

    yaml_implicit_resolvers = {  # noqa: RUF012 - PyYAML's class-level registry
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (list, dict)):  # `? [a]`: no recipe key is a list or a mapping
                raise yaml.constructor.ConstructorError(
                    None, None, "a key that is a list or a mapping", key_node.start_mark
                )
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {str(key)[:64]!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _Refused(Exception):
    """The YAML is well-formed but too big to expand: aliases, nesting or NUL bytes."""


def _check_nodes(root: yaml.Node) -> None:
    """Bound the document before it is built: its size as if every alias were expanded (each distinct
    node is sized once, so a bomb costs its written size), its depth, and NUL bytes, which no argv or
    env value can carry."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if depth > _MAX_DEPTH:
            raise _Refused(f"nests too deeply (over {_MAX_DEPTH} levels)")
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif "\0" in node.value:
            raise _Refused(f"holds a NUL byte (line {node.start_mark.line + 1})")
        if id(node) in sizes:
            continue
        if not done:
            stack.append((node, depth, True))
            stack += [(child, depth + 1, False) for child in children if id(child) not in sizes]
            continue
        sizes[id(node)] = 1 + sum(sizes.get(id(child), 1) for child in children)
        if sizes[id(node)] > _MAX_NODES:
            raise _Refused(f"expands to more than {_MAX_NODES} values (YAML aliases)")


@dataclass(frozen=True)
class RecipeSource:
    """Where a recipe comes from, and the setting a person changes to fix it."""

    name: str
    file: str | None

    @property
    def setting(self) -> str:
        return "LLMD_RECIPE" if self.file is None else "LLMD_RECIPE_FILE"

    @property
    def label(self) -> str:
        """For messages: a path with a newline in it would break the one-line-per-problem rule."""
        if self.file is None:
            return (
                f"built-in recipe {self.name!r}"
                if not self.name.isprintable()
                else f"built-in recipe {self.name}"
            )
        return self.file if self.file.isprintable() and self.file else repr(self.file)


def builtin_recipe_names() -> list[str]:
    files = resources.files("launcher.config").joinpath("recipes").iterdir()
    return sorted(f.name.removesuffix(".yaml") for f in files if f.name.endswith(".yaml"))


def _parse_yaml(text: str, source: RecipeSource) -> Mapping[str, Any]:
    """The YAML's data, or one line saying where it is broken: never the offending line itself,
    which may hold a secret (an env value, a JSON config with credentials)."""
    if len(text) > MAX_RECIPE_BYTES:
        raise ConfigError.one(
            source.setting, f"{source.label} is too large (over {MAX_RECIPE_BYTES} bytes)", "trim the recipe"
        )
    loader = None
    try:
        loader = _RecipeLoader(text)
        root = loader.get_single_node()
        if root is not None:
            _check_nodes(root)
        data = None if root is None else loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        if "nesting depth" in str(exc.problem):  # libyaml's own bound (1000 levels)
            raise ConfigError.one(
                source.setting, f"{source.label} nests too deeply", "simplify the YAML"
            ) from None
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = " ".join(x for x in (exc.context, exc.problem) if x)
        raise ConfigError.one(
            source.setting, f"{source.label} is not valid YAML ({what}{where})", "fix the YAML"
        ) from None
    except yaml.reader.ReaderError as exc:  # names the character, never the text around it
        what = f"character #x{exc.character:04x} at position {exc.position}"
        raise ConfigError.one(
            source.setting, f"{source.label} has an unacceptable {what}", "fix the YAML"
        ) from None
    except RecursionError:  # the composer recurses per level, before _check_nodes can count them
        raise ConfigError.one(
            source.setting, f"{source.label} nests too deeply", "simplify the YAML"
        ) from None
    except _Refused as exc:
        raise ConfigError.one(source.setting, f"{source.label} {exc}", "simplify the YAML") from None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(data, dict):
        raise ConfigError.one(
            source.setting, f"{source.label} must hold a YAML mapping", "start it with `name: ...`"
        )
    section = data.get("launcher")
    if isinstance(section, dict) and not all(isinstance(k, str) for k in section):
        raise ConfigError.one(
            source.setting,
            f"{source.label}: `launcher:` has a key that is not a setting name",
            "fix the recipe",
        )
    return data


@functools.lru_cache(maxsize=8)
def read_recipe(source: RecipeSource) -> Mapping[str, Any]:
    """The raw mapping of a recipe. Cached: the settings (its `launcher:` section) and the recipe
    itself are both read from it, and a mounted file is read once per process."""
    if source.file is not None:
        try:
            text = Path(source.file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError.one(
                source.setting,
                f"cannot read {source.label} ({exc.strerror})",
                "mount the recipe file or fix the path",
            ) from None
        except UnicodeDecodeError:
            raise ConfigError.one(
                source.setting, f"{source.label} is not UTF-8 text", "save it as UTF-8"
            ) from None
        return _parse_yaml(text, source)
    names = builtin_recipe_names()
    if source.name not in names:
        raise ConfigError.one(
            "LLMD_RECIPE",
            f"unknown recipe {source.name!r}",
            f"use one of {', '.join(names)} or set LLMD_RECIPE_FILE",
        )
    text = (resources.files("launcher.config") / "recipes" / f"{source.name}.yaml").read_text(
        encoding="utf-8"
    )
    return _parse_yaml(text, source)


def _problem_path(loc: tuple[int | str, ...]) -> str:
    """pools.prefill.vllm.port -> pools.prefill.port; args.x.<anything deeper> -> args.x."""
    parts = [str(p) for p in loc if not str(p).startswith("function-after")]
    parts = [p for p in parts if p not in ("vllm", "sglang", "mooncake-master", "mooncake-donor")]
    return ".".join(parts) or "<top>"


def validate_recipe(data: Mapping[str, Any], source: RecipeSource) -> Recipe:
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        problems: dict[str, Problem] = {}
        for err in exc.errors(include_url=False):
            where = _problem_path(err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            problems.setdefault(
                where,
                Problem(source.setting, f"{source.label}: {where}: {msg}", "correct the recipe (see README)"),
            )
        raise ConfigError(list(problems.values())) from None


def load_recipe(source: RecipeSource, name_given: bool = False) -> Recipe:
    """The recipe a pod runs: the user file when given, else the built-in recipe by name."""
    recipe = validate_recipe(read_recipe(source), source)
    if source.file is not None and name_given and recipe.name != source.name:
        raise ConfigError.one(
            "LLMD_RECIPE",
            f"is {source.name!r} but LLMD_RECIPE_FILE holds recipe {recipe.name!r}",
            "unset one of them",
        )
    return recipe
