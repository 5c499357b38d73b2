"""Everything the pod knows, validated once: LWS + downward-API env, LLMD_* settings, CLI flags.

Precedence: CLI flags > environment > the `launcher:` section of the recipe. An empty env value is a
value (and usually a templating mistake), not "unset": it is validated like any other.
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import Any, Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from launcher.addresses import is_ip
from launcher.config.recipe import EnvMap, RecipeSource, read_recipe
from launcher.errors import ConfigError, Problem
from launcher.redact import REDACTED

DEFAULT_RECIPE = "kimi-k3.1-pro"
_DNS_NAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
)


def _env(name: str, **kw: Any) -> Any:
    return Field(None, validation_alias=AliasChoices(name), **kw)


class Settings(BaseSettings):
    """The pod's inputs. Field names double as CLI option names (`worker_index` -> --worker-index)."""

    model_config = SettingsConfigDict(env_prefix="LLMD_", populate_by_name=True, extra="ignore", frozen=True)

    # LeaderWorkerSet: https://lws.sigs.k8s.io/docs/reference/labels-annotations-and-environment-variables/
    leader_address: str | None = _env("LWS_LEADER_ADDRESS")
    group_size: int | None = _env("LWS_GROUP_SIZE", ge=1)
    worker_index: int | None = _env("LWS_WORKER_INDEX", ge=0)
    # Downward API
    pod_ip: str | None = _env("POD_IP")
    pod_name: str | None = _env("POD_NAME")
    pod_namespace: str | None = _env("POD_NAMESPACE")
    node_name: str | None = _env("NODE_NAME")
    # TPU env injected by LWS (kubernetes-sigs/lws pkg/utils/accelerators/tpu.go)
    tpu_worker_id: int | None = _env("TPU_WORKER_ID", ge=0)
    tpu_worker_hostnames: str | None = _env("TPU_WORKER_HOSTNAMES")

    # The launcher's own (LLMD_*)
    recipe: str = DEFAULT_RECIPE
    recipe_file: str | None = None
    pool: str | None = None
    gpus_per_node: int | None = Field(None, ge=1)
    extra_args: str = ""
    extra_env: EnvMap = {}
    runtime_dir: str = "/tmp/llm-d-launcher"
    check_flags: bool = True  # engine flags against the catalogue of the engine's own parser
    # Supervision (`run`)
    grace_seconds: int = Field(30, ge=1)  # the pod's terminationGracePeriodSeconds minus any preStop
    bin_path: str = ""  # directories searched before PATH for the plan's binaries (engine venvs)
    shm_dir: str = "/dev/shm"  # stale files here are removed before spawning ("" disables)
    termination_log: str = "/dev/termination-log"
    leader_wait_seconds: float = Field(120.0, gt=0)
    sidecar_restarts: int = Field(5, ge=0)  # restarts allowed per window before a sidecar is fatal
    sidecar_restart_window: float = Field(300.0, gt=0)
    restart_backoff_seconds: float = Field(1.0, gt=0)  # first restart delay; doubles, capped at 30 s
    log_format: Literal["auto", "json", "text"] = "auto"  # auto: JSON unless stderr is a terminal
    # Probes (healthchecks/): 8090 is no port of the guide's pods.
    probe_port: int = Field(8090, ge=1, le=65535)
    probe_host: str = ""  # the probe server's bind address; "" = every interface (kubelet uses the pod IP)
    check_interval: float = Field(2.0, gt=0)  # seconds between two runs of one readiness check
    check_timeout: float = Field(5.0, gt=0)  # a check slower than this fails

    @field_validator("leader_address")
    @classmethod
    def _leader_is_a_host(cls, value: str | None) -> str | None:
        if value is not None and not (is_ip(value) or _DNS_NAME.match(value)):
            raise ValueError("is neither an IP address nor a DNS name")
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

    @field_validator("runtime_dir")
    @classmethod
    def _runtime_dir_is_absolute(cls, value: str) -> str:
        if not posixpath.isabs(value):
            raise ValueError("is not an absolute path")
        return value

    @field_validator("shm_dir", "termination_log")
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
        return (init_settings, env_settings, RecipeLauncherSection(settings_cls))

    @property
    def lws_env_present(self) -> bool:
        return any(v is not None for v in (self.leader_address, self.group_size, self.worker_index))

    @property
    def recipe_source(self) -> RecipeSource:
        return RecipeSource(self.recipe, self.recipe_file)


# Settings that `plan` and `run` also take as CLI flags (--worker-index, ...; extra_env is --env).
CLI_FIELDS = (
    "recipe", "recipe_file", "pool", "worker_index", "group_size", "leader_address", "pod_ip",
    "gpus_per_node", "extra_args", "extra_env", "runtime_dir", "probe_port",
)  # fmt: skip

# Settings a recipe's `launcher:` section may not set: they choose the recipe, or describe the pod.
_POD_FIELDS = frozenset(
    {"recipe", "recipe_file", "leader_address", "group_size", "worker_index", "pod_ip", "pod_name",
     "pod_namespace", "node_name", "tpu_worker_id", "tpu_worker_hostnames"}
)  # fmt: skip


class RecipeLauncherSection(PydanticBaseSettingsSource):
    """Lowest-priority source: defaults from the `launcher:` mapping of the pod's recipe."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        raise NotImplementedError  # __call__ is overridden; pydantic-settings requires the method

    def __call__(self) -> dict[str, Any]:
        source = RecipeSource(
            self.current_state.get("recipe", DEFAULT_RECIPE), self.current_state.get("recipe_file")
        )
        section = read_recipe(source).get("launcher") or {}
        if not isinstance(section, dict):
            raise ConfigError.one(
                source.setting, f"{source.label}: `launcher:` must be a mapping", "fix the recipe"
            )
        allowed = sorted(set(Settings.model_fields) - _POD_FIELDS)
        unknown = sorted(set(section) - set(allowed))
        if unknown:
            raise ConfigError.one(
                source.setting,
                f"{source.label}: `launcher:` cannot set {', '.join(map(str, unknown))}",
                f"use only {', '.join(allowed)}",
            )
        return dict(section)


def _env_name(field: str) -> str:
    alias = Settings.model_fields[field].validation_alias
    return alias.choices[0] if isinstance(alias, AliasChoices) else f"LLMD_{field.upper()}"  # type: ignore[return-value]


def setting_label(field: str, cli: dict[str, Any] | None = None) -> str:
    """How a person set the value that failed: its CLI flag, its env var, or the recipe's launcher: key."""
    if field not in Settings.model_fields:
        return field
    env = _env_name(field)
    if field not in CLI_FIELDS:
        return env if env in os.environ or cli is None else f"recipe launcher.{field} ({env})"
    flag = "--env" if field == "extra_env" else f"--{field.replace('_', '-')}"
    if cli and field in cli:
        return f"{flag} ({env})"
    if env in os.environ or cli is None:
        return f"{env} ({flag})"
    return f"recipe launcher.{field} ({env})"


_FIXES = {
    "worker_index": "set it to the pod's worker index, an integer from 0 (LWS sets it from the "
    "leaderworkerset.sigs.k8s.io/worker-index label)",
    "group_size": "set it to the LWS group size, a positive integer (leaderWorkerTemplate.size)",
    "leader_address": "set it to the leader pod's DNS name or IP (LWS injects it)",
    "tpu_worker_id": "it must be a non-negative integer (LWS injects it on TPU pods)",
    "pod_ip": "set it from the downward API (fieldRef: status.podIP)",
    "gpus_per_node": "set it to the number of accelerator devices in the pod, a positive integer",
    "runtime_dir": "give an absolute directory, e.g. /tmp/llm-d-launcher",
    "extra_env": 'give a JSON object of strings, e.g. {"VLLM_LOGGING_LEVEL": "DEBUG"}',
    "grace_seconds": "set it to the pod's terminationGracePeriodSeconds (minus any preStop sleep)",
    "shm_dir": "give an absolute directory, or an empty value to skip the /dev/shm clean-up",
    "termination_log": "give an absolute file path (default /dev/termination-log), or empty to skip it",
    "leader_wait_seconds": "give a positive number of seconds",
    "sidecar_restarts": "give a non-negative integer",
    "sidecar_restart_window": "give a positive number of seconds",
    "restart_backoff_seconds": "give a positive number of seconds",
    "log_format": "use auto, json or text",
    "probe_port": "give a port number 1-65535 that no process of the pod uses (default 8090)",
    "probe_host": "give an IP address to bind the probe server to, or empty for every interface",
    "check_interval": "give a positive number of seconds",
    "check_timeout": "give a positive number of seconds",
}


def _field_of(loc: tuple[int | str, ...]) -> str:
    first = str(loc[0]) if loc else ""
    for name, info in Settings.model_fields.items():
        alias = info.validation_alias
        if first == name or (isinstance(alias, AliasChoices) and first in alias.choices):
            return name
    return first


def load_settings(**cli: Any) -> Settings:
    """Settings from the process env plus CLI values (None means 'not given on the command line')."""
    given = {k: v for k, v in cli.items() if v is not None}
    try:
        settings = Settings(**given)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            field = _field_of(err["loc"])
            shown = REDACTED if field == "extra_env" else repr(err.get("input"))
            message = err["msg"].removeprefix("Value error, ")
            problems.append(
                Problem(
                    setting_label(field, given),
                    f"{message[:1].lower()}{message[1:]} (got {shown})",
                    _FIXES.get(field, "correct the value"),
                )
            )
        raise ConfigError(problems) from None
    except SettingsError as exc:
        # pydantic-settings raises this when a complex value (LLMD_EXTRA_ENV) is not JSON.
        field = next((f for f in Settings.model_fields if f'"{f}"' in str(exc)), "extra_env")
        raise ConfigError.one(
            setting_label(field, given), "is not valid JSON", _FIXES.get(field, "correct it")
        ) from None
    _check_lws_env(settings)
    return settings


def _check_lws_env(settings: Settings) -> None:
    """LWS injects all three; some set and others not is a broken pod spec, and defaulting the index
    would make every pod a leader. (LWS releases before kubernetes-sigs/lws#416 do not inject
    LWS_WORKER_INDEX.)"""
    if not settings.lws_env_present:
        return
    problems = []
    if settings.group_size is None:
        fix = "set it to the LeaderWorkerSet's size"
        problems.append(Problem("LWS_GROUP_SIZE", "is not set while other LWS variables are", fix))
    if settings.worker_index is None:
        fix = "set it from metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"
        problems.append(Problem("LWS_WORKER_INDEX", "is not set while other LWS variables are", fix))
    if problems:
        raise ConfigError(problems)
