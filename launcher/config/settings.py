"""Everything the pod knows, validated once: LWS + downward-API env, LLMD_* settings, CLI flags.

Precedence: CLI flags > environment > the `launcher:` section of the recipe. An empty env value is a
value (and usually a templating mistake), not "unset": it is validated like any other.

Each setting is declared once, as a field of `Settings` built by `setting()`/`pod_setting()`: its
type, default and bounds, its env name, its CLI flag, its help line and the fix shown when it is
wrong. The `plan`/`run` flags, the settings part of `--help`, error labels and fixes, and the
settings table in docs/reference/settings.md (scripts/generate_docs.py) are generated from those
declarations (the model of gunicorn's `Setting` classes, gunicorn/config.py, which feed its CLI,
config file and docs).
"""

from __future__ import annotations

import copy
import math
import os
import posixpath
import re
import textwrap
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BeforeValidator, Field, TypeAdapter, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)
from pydantic_settings.sources.utils import parse_env_vars

from launcher.config.defaults import CATALOG_DIR, LOCAL_GROUP_TAG, PROBE_PORT, TERMINATION_LOG
from launcher.config.recipe import EnvMap
from launcher.config.recipe_file import RecipeSource, read_recipe
from launcher.contract import lws
from launcher.contract.addresses import is_dns_name, is_host_port, is_ip
from launcher.contract.errors import ConfigError, Problem
from launcher.contract.plan import DEREGISTER_SHARE, IFNAME_PLACEHOLDER, share_words
from launcher.contract.record import record
from launcher.contract.redact import REDACTED, is_secret_flag, is_secret_name

DEFAULT_RECIPE = "kimi-k3.1-pro"
_FLAG_NAME = re.compile(r"--?[A-Za-z0-9][A-Za-z0-9_-]*")


def _forever(value: Any) -> Any:
    """`forever` is the one way to say "no bound": inf, infinity or nan are refused like anywhere else."""
    if value == "forever":
        return math.inf
    try:
        number = float(value)
    except (TypeError, ValueError):
        return value  # pydantic says what is wrong with it
    if not math.isfinite(number):
        raise ValueError("is not a finite number of seconds (write `forever` for no bound)")
    return value


# Seconds a pod of an LWS group stays parked (launcher/parking.py); `forever` is math.inf.
ParkSeconds = Annotated[float, BeforeValidator(_forever)]

# pod: injected by LWS or the downward API; plan: read by `plan` and `run`; run: read by `run` only.
Section = Literal["pod", "plan", "run"]


@record
class SettingDoc:
    """One setting as a person meets it. Stored as the field's pydantic `json_schema_extra` hook, so
    the declaration carries it and `Settings.model_json_schema()` shows it."""

    meaning: str  # one line: --help, the README table
    fix: str  # shown after the error; "{default}" is replaced by the default
    section: Section
    env: str | None = None  # the env name when it is not LLMD_<FIELD>
    flag: str | None = None  # `plan` and `run` take it on the command line as well
    metavar: str = "VALUE"
    launcher_key: bool = True  # a recipe's `launcher:` section may set it

    def __call__(self, schema: dict[str, Any]) -> None:
        schema.update({"x-env": self.env, "x-flag": self.flag, "x-fix": self.fix})


def setting(
    default: Any,
    meaning: str,
    *,
    fix: str = "correct the value",
    section: Section = "plan",
    flag: str | None = None,
    metavar: str = "VALUE",
    launcher_key: bool = True,
    **bounds: Any,
) -> Any:
    """A launcher setting (LLMD_<FIELD>): its default, bounds (ge, gt, le) and documentation. A number
    of seconds is finite: inf passes every lower bound, then overflows the clocks and timeouts it
    reaches (int(), aiohttp's timeouts)."""
    doc = SettingDoc(meaning, fix, section, flag=flag, metavar=metavar, launcher_key=launcher_key)
    if isinstance(default, float):
        bounds.setdefault("allow_inf_nan", False)
    return Field(default, description=meaning, json_schema_extra=doc, **bounds)


def pod_setting(
    env: str,
    meaning: str,
    *,
    fix: str = "correct the value",
    flag: str | None = None,
    metavar: str = "VALUE",
    **bounds: Any,
) -> Any:
    """A fact about the pod, under its Kubernetes env name; no recipe may set it."""
    doc = SettingDoc(meaning, fix, "pod", env=env, flag=flag, metavar=metavar, launcher_key=False)
    return Field(
        None, validation_alias=AliasChoices(env), description=meaning, json_schema_extra=doc, **bounds
    )


class Settings(BaseSettings):
    """The pod's inputs, one declaration each."""

    model_config = SettingsConfigDict(env_prefix="LLMD_", populate_by_name=True, extra="ignore", frozen=True)

    # LeaderWorkerSet: https://lws.sigs.k8s.io/docs/reference/labels-annotations-and-environment-variables/
    leader_address: str | None = pod_setting(
        lws.LEADER_ADDRESS,
        "the leader pod's DNS name or IP (injected by LWS)",
        fix="set it to the leader pod's DNS name or IP (LWS injects it)",
        flag="--leader-address",
        metavar="ADDR",
    )
    group_size: int | None = pod_setting(
        lws.GROUP_SIZE,
        "pods per LWS group (injected by LWS); must equal the pool's `nodes`",
        fix="set it to the LWS group size, a positive integer (leaderWorkerTemplate.size)",
        flag="--group-size",
        metavar="N",
        ge=1,
    )
    worker_index: int | None = pod_setting(
        lws.WORKER_INDEX,
        "this pod's index in its group, 0 = leader (injected by LWS)",
        fix="set it to the pod's worker index, an integer from 0 (LWS sets it from the "
        "leaderworkerset.sigs.k8s.io/worker-index label)",
        flag="--worker-index",
        metavar="N",
        ge=0,
    )
    # Downward API
    pod_ip: str | None = pod_setting(
        "POD_IP",
        "the pod's IP (downward API, status.podIP); must be an IP address",
        fix="set it from the downward API (fieldRef: status.podIP)",
        flag="--pod-ip",
        metavar="IP",
    )
    pod_name: str | None = pod_setting("POD_NAME", "the pod's name (downward API, metadata.name)")
    pod_namespace: str | None = pod_setting(
        "POD_NAMESPACE", "the pod's namespace (downward API, metadata.namespace)"
    )
    node_name: str | None = pod_setting("NODE_NAME", "the pod's node (downward API, spec.nodeName)")
    lws_name: str | None = pod_setting(
        lws.LWS_NAME,
        "the pod's LeaderWorkerSet (downward API, the label leaderworkerset.sigs.k8s.io/name): the "
        "Kubernetes Event saying why the pod ended or parked is recorded on it; unset: no Event",
    )
    # TPU env injected by LWS (kubernetes-sigs/lws pkg/utils/accelerators/tpu.go)
    tpu_worker_id: int | None = pod_setting(
        "TPU_WORKER_ID",
        "injected by LWS on TPU pods; must equal LWS_WORKER_INDEX",
        fix="it must be a non-negative integer (LWS injects it on TPU pods)",
        ge=0,
    )
    tpu_worker_hostnames: str | None = pod_setting(
        "TPU_WORKER_HOSTNAMES", "injected by LWS on TPU pods: the group's hosts, comma-separated"
    )

    # The launcher's own (LLMD_*)
    recipe: str = setting(
        DEFAULT_RECIPE,
        "built-in recipe; `llm-d-launcher recipes` lists them",
        flag="--recipe",
        metavar="NAME",
        launcher_key=False,
    )
    recipe_file: str | None = setting(
        None,
        "a recipe YAML file, e.g. a mounted ConfigMap; replaces LLMD_RECIPE",
        flag="--recipe-file",
        metavar="PATH",
        launcher_key=False,
    )
    pool: str | None = setting(
        None,
        "the recipe pool this pod belongs to (default: the recipe's `default_pool`)",
        flag="--pool",
        metavar="NAME",
    )
    gpus_per_node: int | None = setting(
        None,
        "accelerator devices the pod holds; checked against TP x local DP, and by `run` against the devices "
        "the pod sees",
        fix="set it to the number of accelerator devices in the pod, a positive integer",
        flag="--gpus-per-node",
        metavar="N",
        ge=1,
    )
    extra_args: str = setting(
        "",
        "extra engine flags, appended last (shell-style quoting; no shell runs); a flag given here "
        "replaces the recipe's flag of the same name (noted in the plan); flags the launcher derives "
        "(ranks, ports, addresses, sizes, KV-event config) and secret-looking flags are refused",
        flag="--extra-args",
        metavar="ARGS",
    )
    extra_env: EnvMap = setting(
        {},
        "extra env for every process: a JSON object; on the command line, --env KEY=VALUE, repeatable",
        fix='give a JSON object of strings, e.g. {"VLLM_LOGGING_LEVEL": "DEBUG"}',
        flag="--env",
        metavar="KEY=VALUE",
    )
    runtime_dir: str = setting(
        "/tmp/llm-d-launcher",
        "where per-pod files are written",
        fix="give an absolute directory, e.g. /tmp/llm-d-launcher",
        flag="--runtime-dir",
        metavar="DIR",
    )
    strict_env: bool = setting(
        False,
        "an LLMD_* variable that names no setting (a typo such as LLMD_STALL_SECOND) is an error, exit 2, "
        "instead of a warning",
        fix="use true or false",
        flag="--strict-env",
        metavar="BOOL",
    )
    allow_flags: str = setting(
        "",
        "engine flags, comma-separated (e.g. --new-flag,--other), let through although the flag "
        "catalogue does not know them; every other flag is still checked, secrets and derived flags "
        "never pass",
        fix="give comma-separated flag names such as --new-flag, no values and no secret flags",
        metavar="FLAGS",
    )
    catalog_dir: str = setting(
        CATALOG_DIR,
        "where the image's own flag catalogues are (`llm-d-launcher catalog build` at image build), "
        "looked at before the built-in ones; empty: built-in only",
        fix="give an absolute directory, or leave it empty",
        metavar="DIR",
    )
    probe_port: int = setting(
        PROBE_PORT,
        "the launcher's probe server (/livez /readyz /startupz /metrics); no port of the guide's pods",
        fix="give a port number 1-65535 that no process of the pod uses (default {default})",
        flag="--probe-port",
        metavar="PORT",
        ge=1,
        le=65535,
    )
    # Supervision (`run`)
    grace_seconds: int = setting(
        30,
        "the pod's `terminationGracePeriodSeconds` minus any preStop; the engine's "
        "`--shutdown-timeout` follows from it",
        fix="set it to the pod's terminationGracePeriodSeconds (minus any preStop sleep)",
        section="run",
        ge=1,
    )
    bin_path: str = setting(
        "",
        "directories searched before `PATH` for the plan's binaries (e.g. an engine venv's `bin`)",
        section="run",
    )
    shm_dir: str = setting(
        "/dev/shm",
        "crashed engines' stale files are removed here before spawning, only those the launcher's own "
        "processes were seen holding (its ledger in this directory) that no process holds now; empty: skip",
        fix="give an absolute directory, or an empty value to skip the /dev/shm clean-up",
        section="run",
    )
    sysfs_root: str = setting(
        "/sys",
        "where the pod's RDMA devices are read (`class/infiniband/`); only tests point it elsewhere",
        fix="give an absolute directory (default {default})",
        section="run",
    )
    store_master_wait_seconds: float = setting(
        60.0,
        "seconds `run` waits for the KV store's master (RPC port, metadata server) its store client uses",
        fix="give a positive number of seconds",
        section="run",
        gt=0,
    )
    event_seconds: float = setting(
        2.0,
        "at most this long, when the pod ends (non-zero) or parks, to record why as a Kubernetes Event "
        "on its LeaderWorkerSet (LWS_NAME), which a group recreation does not delete; 0: no Event",
        fix="give a number of seconds from 0 to 5",
        section="run",
        launcher_key=False,  # read from the env alone: a pod whose settings failed records it too
        ge=0,
        le=5,
    )
    service_account_dir: str = setting(
        "/var/run/secrets/kubernetes.io/serviceaccount",
        "where the pod's ServiceAccount token and the API server's CA are mounted (the Event's "
        "credentials; the token is never logged); nothing there: no Event",
        fix="give an absolute directory (default {default})",
        section="run",
        launcher_key=False,
    )
    event_system_ca: bool = setting(
        False,
        "with no ca.crt in the ServiceAccount mount, send the Event (and the pod's token) to an API server "
        "the system trust store vouches for, as client-go does; off: no Event without the cluster's CA",
        fix="use true or false",
        section="run",
        launcher_key=False,
    )
    termination_log: str = setting(
        TERMINATION_LOG,
        "why the pod ended, root cause first; empty: skip",
        fix="give an absolute file path (default {default}), or empty to skip it",
        section="run",
    )
    leader_wait_seconds: float = setting(
        120.0,
        "seconds `run` waits for the leader's DNS name to resolve",
        fix="give a positive number of seconds",
        section="run",
        gt=0,
    )
    sidecar_restarts: int = setting(
        5,
        "restarts a sidecar may make per LLMD_SIDECAR_RESTART_WINDOW before its failure is fatal",
        fix="give a non-negative integer",
        section="run",
        ge=0,
    )
    sidecar_restart_window: float = setting(
        300.0,
        "seconds over which sidecar restarts are counted",
        fix="give a positive number of seconds",
        section="run",
        gt=0,
    )
    restart_backoff_seconds: float = setting(
        1.0,
        "a sidecar's first restart delay in seconds; it doubles on each restart, up to a cap",
        fix="give a positive number of seconds",
        section="run",
        gt=0,
    )
    log_format: Literal["auto", "json", "text"] = setting(
        "auto",
        "`auto` (JSON unless stderr is a terminal), `json` or `text`",
        fix="use auto, json or text",
        section="run",
    )
    probe_host: str = setting(
        "",
        "the probe server's bind address; empty: every interface (the kubelet probes the pod IP)",
        fix="give an IP address to bind the probe server to, or empty for every interface",
        section="run",
    )
    kv_events_token_ids: bool = setting(
        False,
        "/kvevents also shows the token ids of the latest BlockStored events: recent prompts, readable by "
        "anyone who reaches the pod IP; off: block hashes, token counts and block sizes only",
        fix="use true or false",
        section="run",
    )
    check_interval: float = setting(
        2.0,
        "seconds between two runs of one readiness check; shorter during start-up",
        fix="give a positive number of seconds",
        section="run",
        gt=0,
    )
    check_timeout: float = setting(
        5.0,
        "seconds after which a readiness check fails",
        fix="give a positive number of seconds",
        section="run",
        gt=0,
    )
    capability_seconds: float = setting(
        60.0,
        "seconds between two runs of the pod's capability checks (the render, metrics, KV-event and "
        "transfer promises `plan` lists), which also run once the engine answers, before the pod is "
        "first ready, and after any process restart; a required one absent makes the pod unready, "
        "never ends it (0: no capability checks)",
        fix="give a number of seconds, or 0 to check no capability",
        ge=0,
    )
    peer_lost_seconds: float = setting(
        10.0,
        "a pod of the LWS group whose launcher answered /livez once and then fails it this long ends "
        "this pod too, so LWS recreates the group at once (0: watch no peer)",
        fix="give a number of seconds, or 0 to watch no peer",
        ge=0,
    )

    stall_seconds: float = setting(
        60.0,
        "a serving engine whose token counters (its /metrics) stood still this long gets one canary, a "
        "one-token completion; no answer within LLMD_CANARY_SECONDS and the pod ends, exit 5 (0: no watch)",
        fix="give a number of seconds, or 0 to watch no forward progress",
        ge=0,
    )
    canary_seconds: float = setting(
        20.0,
        "seconds a canary completion may take before the engine counts as stalled",
        fix="give a positive number of seconds",
        gt=0,
    )
    step_seconds: float = setting(
        180.0,
        "requests running on a serving engine and no step of its scheduler (the per-step signals on its "
        "/metrics, named in the plan) this long: stalled, the pod ends, exit 5, no canary needed. The "
        "default outlasts one step at the recipe's max-num-batched-tokens and a first-time kernel "
        "compile, and tells a hang before the engine's own execute-model timeout (300 s, multi-GPU "
        "engines only; docs/probes-and-watchers.md) (0: busy time is not judged)",
        fix="give a number of seconds, or 0 to judge no busy engine",
        ge=0,
    )
    pd_canary_prefiller: str | None = setting(
        None,
        "host:port of a prefill endpoint (IPv6 in brackets): a decode pod with a disagg sidecar sends its "
        "canary through the sidecar with the x-prefiller-host-port header every LLMD_STALL_SECONDS, "
        "proving prefill, the KV transfer and decode; counted in /metrics and shown in /livez, never a "
        "verdict (unset: none sent)",
        fix="give host:port of a prefill pod's API (e.g. the prefill Service), IPv6 as [addr]:port, "
        "or unset it",
        metavar="HOST:PORT",
    )
    startup_seconds: float = setting(
        2700.0,
        "start-up not ended this long after launch ends the pod, exit 6, naming the phase it was stuck in; "
        "the engine's own earlier start-up timeouts are raised to it; keep it within the startup "
        "probe's periodSeconds x failureThreshold (0: no deadline)",
        fix="give a number of seconds, or 0 for no start-up deadline",
        ge=0,
    )
    park_seconds: ParkSeconds = setting(
        600.0,
        "in an LWS group, bad input or a failed preflight parks the pod (alive, not started, re-checking "
        "with back-off) instead of exiting, since LWS would recreate the group into the same mistake; "
        "after this long parked it exits 2; `forever`: until fixed or deleted; 0: exit at once. The "
        "startup probe's periodSeconds x failureThreshold must cover it plus LLMD_STARTUP_SECONDS",
        fix="give a number of seconds, `forever`, or 0 to exit at once",
        section="run",
        launcher_key=False,
        ge=0,
        allow_inf_nan=True,  # for `forever` alone: _forever refuses inf and nan spelled any other way
    )
    deregister_seconds: int = setting(
        5,
        "on SIGTERM, seconds the pod stays not ready but serving before the engine is signalled, so "
        f"endpoints and the router stop sending first; at most {share_words(DEREGISTER_SHARE)} of "
        "LLMD_GRACE_SECONDS",
        fix="give a non-negative integer number of seconds",
        ge=0,
    )

    @field_validator("leader_address")
    @classmethod
    def _leader_is_a_host(cls, value: str | None) -> str | None:
        if value is not None and not (is_ip(value) or is_dns_name(value)):
            raise ValueError("is neither an IP address nor a DNS name")
        return value

    @field_validator("pd_canary_prefiller")
    @classmethod
    def _prefiller_is_host_port(cls, value: str | None) -> str | None:
        if value is not None and not is_host_port(value):
            raise ValueError("is not host:port (an IPv6 address in brackets: [addr]:port)")
        return value

    @field_validator("pod_ip")
    @classmethod
    def _pod_ip_is_an_ip(cls, value: str | None) -> str | None:
        if value is not None and not is_ip(value):
            raise ValueError("is not an IP address")
        return value

    @field_validator("probe_host")
    @classmethod
    def _probe_host_is_an_ip(cls, value: str) -> str:
        if value and not is_ip(value):
            raise ValueError("is not an IP address")
        return value

    @field_validator("runtime_dir", "sysfs_root", "service_account_dir")
    @classmethod
    def _runtime_dir_is_absolute(cls, value: str) -> str:
        if not posixpath.isabs(value):
            raise ValueError("is not an absolute path")
        return value

    @field_validator("allow_flags")
    @classmethod
    def _flag_names(cls, value: str) -> str:
        for name in filter(None, (n.strip() for n in value.split(","))):
            if not _FLAG_NAME.fullmatch(name):
                raise ValueError(f"{name[:40]!r} is not a flag name such as --new-flag")
            if is_secret_flag(name):
                raise ValueError(f"{name} is a secret's flag: pass it in the env from a Secret")
        return value

    @property
    def allowed_flags(self) -> frozenset[str]:
        """LLMD_ALLOW_FLAGS as flag names."""
        return frozenset(filter(None, (n.strip() for n in self.allow_flags.split(","))))

    @field_validator("shm_dir", "termination_log", "catalog_dir")
    @classmethod
    def _empty_or_absolute(cls, value: str) -> str:
        if value and not posixpath.isabs(value):
            raise ValueError("is not an absolute path")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, BoundedEnvSource(settings_cls), RecipeLauncherSection(settings_cls))

    @property
    def lws_env_present(self) -> bool:
        return any(v is not None for v in (self.leader_address, self.group_size, self.worker_index))

    @property
    def recipe_source(self) -> RecipeSource:
        return RecipeSource(self.recipe, self.recipe_file)


TOO_DEEP = "is nested too deeply"
# Another pod's env and recipe mapping (`lint` plans the pods of a manifest): while set, they are the
# settings' sources in place of this process's environment and the recipe file it names.
_ANOTHER_POD: ContextVar[tuple[Mapping[str, str], Mapping[str, Any]] | None] = ContextVar(
    "another_pod", default=None
)


class BoundedEnvSource(EnvSettingsSource):
    """The environment, with JSON values (LLMD_EXTRA_ENV) nested past Python's recursion limit as a
    value error (pydantic-settings' SettingsError, one line) instead of the decoder's RecursionError."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        pod = _ANOTHER_POD.get()
        if pod is None:
            return super()._load_env_vars()
        return parse_env_vars(pod[0], self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        try:
            return super().decode_complex_value(field_name, field, value)
        except RecursionError:
            raise ValueError(TOO_DEEP) from None


class RecipeLauncherSection(PydanticBaseSettingsSource):
    """Lowest-priority source: defaults from the `launcher:` mapping of the pod's recipe."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        raise NotImplementedError  # __call__ is overridden; pydantic-settings requires the method

    def __call__(self) -> dict[str, Any]:
        source = RecipeSource(
            self.current_state.get("recipe", DEFAULT_RECIPE), self.current_state.get("recipe_file")
        )
        pod = _ANOTHER_POD.get()
        section = (read_recipe(source) if pod is None else pod[1]).get("launcher") or {}
        if not isinstance(section, dict):
            raise ConfigError.one(
                source.setting, f"{source.label}: `launcher:` must be a mapping", "fix the recipe"
            )
        allowed = sorted(field for field, doc in DOCS.items() if doc.launcher_key)
        unknown = sorted(set(section) - set(allowed))
        if unknown:
            raise ConfigError.one(
                source.setting,
                f"{source.label}: `launcher:` cannot set {', '.join(map(str, unknown))}",
                f"use only {', '.join(allowed)}",
            )
        return dict(section)


DOCS: dict[str, SettingDoc] = {
    name: info.json_schema_extra
    for name, info in Settings.model_fields.items()
    if isinstance(info.json_schema_extra, SettingDoc)
}
# Settings that `plan` and `run` also take as CLI flags, in declaration order: field -> flag.
CLI_FLAGS = {name: doc.flag for name, doc in DOCS.items() if doc.flag}


def env_name(field: str) -> str:
    return DOCS[field].env or f"LLMD_{field.upper()}"


def shown_default(field: str) -> str | None:
    """The default as a person would type it; None when there is nothing worth showing."""
    value = Settings.model_fields[field].default
    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def fix_for(field: str) -> str:
    doc = DOCS.get(field)
    return doc.fix.replace("{default}", shown_default(field) or "") if doc else "correct the value"


def settings_help(*sections: Section, width: int = 100) -> str:
    """The settings part of a `--help` epilog: env name, meaning, default."""
    wide = max(len(env_name(f)) for f in DOCS)
    lines = []
    for field, doc in DOCS.items():
        if doc.section in sections:
            default = shown_default(field)
            text = f"{doc.meaning} (default {default})" if default else doc.meaning
            head = f"  {env_name(field):<{wide}} "
            lines.append(textwrap.fill(text, width, initial_indent=head, subsequent_indent=" " * len(head)))
    return "\n".join(lines)


def settings_table() -> str:
    """The settings table of docs/reference/settings.md."""
    rows = ["| env | CLI | meaning |", "|---|---|---|"]
    for field, doc in DOCS.items():
        default = shown_default(field)
        meaning = f"{doc.meaning} (default `{default}`)" if default else doc.meaning
        flag = f"`{doc.flag}`" if doc.flag else ""
        rows.append(f"| `{env_name(field)}` | {flag} | {meaning} |")
    return "\n".join(rows) + "\n"


def setting_label(field: str, cli: dict[str, Any] | None = None) -> str:
    """How a person set the value that failed: its CLI flag, its env var, or the recipe's launcher: key."""
    if field not in DOCS:
        return field
    env, flag = env_name(field), CLI_FLAGS.get(field)
    if cli and flag and field in cli:
        return f"{flag} ({env})"
    if env in os.environ or cli is None:
        return f"{env} ({flag})" if flag else env
    return f"recipe launcher.{field} ({env})"


# LLMD_* names the launcher sets itself, which are not settings.
_LAUNCHER_ENV = (LOCAL_GROUP_TAG, IFNAME_PLACEHOLDER.removeprefix("$(").removesuffix(")"))


def unknown_env(environ: Mapping[str, str]) -> list[Problem]:
    """LLMD_* variables that name no setting, with the closest setting's name: without a word a typo
    (LLMD_STALL_SECOND=30) would leave the default in force."""
    prefix = "LLMD_"
    known = sorted(env_name(f).removeprefix(prefix) for f in DOCS if env_name(f).startswith(prefix))
    problems = []
    for name in sorted(environ):
        rest = name.removeprefix(prefix)
        if rest == name or rest in known or name in _LAUNCHER_ENV:
            continue
        import difflib  # for the hint only: a pod without a stray LLMD_* variable never loads it

        close = difflib.get_close_matches(rest, known, n=1)  # without the prefix every name is close
        fix = (
            f"did you mean {prefix}{close[0]}?"
            if close
            else "`llm-d-launcher plan --help` lists the settings"
        )
        problems.append(Problem(name, "names no launcher setting and has no effect", fix))
    return problems


def default_recipe_note(settings: Settings) -> str | None:
    """LLMD_POOL set and no recipe named: the pod plans the built-in default recipe, which is what a
    pod whose own recipe was never wired in (LLMD_RECIPE_FILE left out of the manifest) would run."""
    if settings.pool is None or {"recipe", "recipe_file"} & settings.model_fields_set:
        return None
    return (
        f"LLMD_POOL is {settings.pool!r} but neither LLMD_RECIPE nor LLMD_RECIPE_FILE is set: planning "
        f"pool {settings.pool!r} of the built-in default recipe {DEFAULT_RECIPE}; set LLMD_RECIPE_FILE to "
        "the pod's recipe (or LLMD_RECIPE to the built-in one meant)"
    )


def env_value(field: str, environ: Mapping[str, str]) -> Any:
    """One setting from the environment alone, or its default when unset or invalid: what a pod whose
    settings failed as a whole still needs (where the probes listen, how long it may park). The
    invalid value is among the problems the pod reports."""
    info = Settings.model_fields[field]
    raw = environ.get(env_name(field))
    if raw is None:
        return info.default
    try:
        # The field's type and bounds; a pod setting's alias means nothing to a lone value (pydantic warns).
        field_info = copy.copy(info)
        field_info.validation_alias = None
        adapter: TypeAdapter[Any] = TypeAdapter(Annotated[info.annotation, field_info])  # type: ignore[arg-type]
        return adapter.validate_python(raw)
    except ValidationError:
        return info.default


def _field_of(loc: tuple[int | str, ...]) -> str:
    first = str(loc[0]) if loc else ""
    return next((field for field in DOCS if first in (field, env_name(field))), first)


def load_settings(**cli: Any) -> Settings:
    """Settings from the process env plus CLI values (None means 'not given on the command line')."""
    given = {k: v for k, v in cli.items() if v is not None}
    try:
        settings = Settings(**given)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            field = _field_of(err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            problems.append(
                Problem(
                    setting_label(field, given),
                    f"{_sentence_start(message)} (got {_shown(field, err.get('input'))})",
                    fix_for(field),
                )
            )
        raise ConfigError(problems) from None
    except SettingsError as exc:
        # pydantic-settings raises this when a complex value (LLMD_EXTRA_ENV) is not JSON.
        field = next((f for f in Settings.model_fields if f'"{f}"' in str(exc)), "extra_env")
        reason = TOO_DEEP if TOO_DEEP in str(exc.__cause__) else "is not valid JSON"
        raise ConfigError.one(setting_label(field, given), reason, fix_for(field)) from None
    _check_lws_env(settings)
    pod = _ANOTHER_POD.get()
    if settings.strict_env and (unknown := unknown_env(os.environ if pod is None else pod[0])):
        raise ConfigError(unknown)
    return settings


def pod_settings(environ: Mapping[str, str], recipe: Mapping[str, Any]) -> Settings:
    """The settings of a pod with this env and this recipe mapping, neither read from this process
    (its env, a recipe file): what `lint` plans each pod of a manifest with."""
    token = _ANOTHER_POD.set((environ, recipe))
    try:
        return load_settings()
    finally:
        _ANOTHER_POD.reset(token)


def _shown(field: str, value: object) -> str:
    """A wrong value as the error line may show it: a scalar of a non-secret setting; of anything
    else only its type (a recipe list may hold a literal token)."""
    if field == "extra_env" or is_secret_name(field) or is_secret_name(env_name(field)):
        return REDACTED
    if isinstance(value, (str, int, float, bool)) or value is None:
        return repr(value)
    return f"a {type(value).__name__}"


def _sentence_start(message: str) -> str:
    """pydantic's "Input should be ..." reads as "input should be ..." after the label; a message
    that begins with a name (an env variable's, e.g. My_Var) keeps its case."""
    first = message.split(" ", 1)[0]
    return message[:1].lower() + message[1:] if first.isalpha() and first[1:].islower() else message


def _check_lws_env(settings: Settings) -> None:
    """LWS injects all three; some set and others not is a broken pod spec, and defaulting the index
    would make every pod a leader. (LWS releases before kubernetes-sigs/lws#416 do not inject
    LWS_WORKER_INDEX.)"""
    if not settings.lws_env_present:
        return
    problems = []
    if settings.group_size is None:
        fix = "set it to the LeaderWorkerSet's size"
        problems.append(Problem(lws.GROUP_SIZE, "is not set while other LWS variables are", fix))
    if settings.worker_index is None:
        fix = "set it from metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"
        problems.append(Problem(lws.WORKER_INDEX, "is not set while other LWS variables are", fix))
    if problems:
        raise ConfigError(problems)
