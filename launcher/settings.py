"""Everything the pod knows, validated once: LWS + downward-API env, LLMD_* settings, CLI flags.

Precedence: CLI flags > environment > the `launcher:` section of the recipe file (LLMD_RECIPE_FILE).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from launcher.errors import ConfigError, Problem
from launcher.redact import REDACTED

DEFAULT_RECIPE = "kimi-k3.1-pro"


def _env(name: str) -> Any:
    return Field(None, validation_alias=AliasChoices(name))


class Settings(BaseSettings):
    """The pod's inputs. Field names double as CLI option names (`worker_index` -> --worker-index)."""

    model_config = SettingsConfigDict(
        env_prefix="LLMD_",
        env_ignore_empty=True,  # `$(VAR)` expansions of unset vars arrive as ""; treat them as unset
        populate_by_name=True,
        extra="ignore",
        frozen=True,
    )

    # LeaderWorkerSet (REFERENCE.md §1.1)
    leader_address: str | None = _env("LWS_LEADER_ADDRESS")
    group_size: int | None = Field(None, ge=1, validation_alias=AliasChoices("LWS_GROUP_SIZE"))
    worker_index: int | None = Field(None, ge=0, validation_alias=AliasChoices("LWS_WORKER_INDEX"))
    # Downward API
    pod_ip: str | None = _env("POD_IP")
    pod_name: str | None = _env("POD_NAME")
    pod_namespace: str | None = _env("POD_NAMESPACE")
    node_name: str | None = _env("NODE_NAME")
    # TPU env injected by LWS (REFERENCE.md §1.6)
    tpu_worker_id: int | None = Field(None, ge=0, validation_alias=AliasChoices("TPU_WORKER_ID"))
    tpu_worker_hostnames: str | None = _env("TPU_WORKER_HOSTNAMES")

    # The launcher's own (LLMD_*)
    recipe: str = DEFAULT_RECIPE
    recipe_file: str | None = None
    pool: str | None = None
    gpus_per_node: int | None = Field(None, ge=1)
    extra_args: str = ""
    extra_env: dict[str, str] = {}
    runtime_dir: str = "/tmp/llm-d-launcher"

    @field_validator("pod_ip")
    @classmethod
    def _pod_ip_is_an_ip(cls, value: str | None) -> str | None:
        if value is not None:
            ipaddress.ip_address(value)  # ValueError names the bad value
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
        return (init_settings, env_settings, RecipeFileLauncherSection(settings_cls))

    @property
    def lws_env_present(self) -> bool:
        return any(v is not None for v in (self.leader_address, self.group_size, self.worker_index))


# Settings a recipe's `launcher:` section may not set: they choose the recipe, or describe the pod.
_POD_FIELDS = frozenset(
    {
        "recipe",
        "recipe_file",
        "leader_address",
        "group_size",
        "worker_index",
        "pod_ip",
        "pod_name",
        "pod_namespace",
        "node_name",
        "tpu_worker_id",
        "tpu_worker_hostnames",
    }
)


class RecipeFileLauncherSection(PydanticBaseSettingsSource):
    """Lowest-priority source: defaults from the `launcher:` mapping of LLMD_RECIPE_FILE."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        raise NotImplementedError  # __call__ is overridden; pydantic-settings requires the method

    def __call__(self) -> dict[str, Any]:
        from launcher.recipe import read_recipe_file

        path = self.current_state.get("recipe_file")
        if not path:
            return {}
        section = read_recipe_file(str(path)).get("launcher") or {}
        if not isinstance(section, dict):
            raise ConfigError.one(
                "LLMD_RECIPE_FILE", f"{path}: `launcher:` must be a mapping", "fix the file"
            )
        unknown = sorted(set(section) - (set(Settings.model_fields) - _POD_FIELDS))
        if unknown:
            allowed = sorted(set(Settings.model_fields) - _POD_FIELDS)
            raise ConfigError.one(
                "LLMD_RECIPE_FILE",
                f"{path}: `launcher:` cannot set {', '.join(unknown)}",
                f"use only {', '.join(allowed)}",
            )
        return dict(section)


def setting_label(field: str) -> str:
    """How a person sets a field: its env var and its CLI flag."""
    info = Settings.model_fields.get(field)
    alias = info.validation_alias if info else None
    env = alias.choices[0] if isinstance(alias, AliasChoices) else f"LLMD_{field.upper()}"
    flag = "--env" if field == "extra_env" else f"--{field.replace('_', '-')}"
    return f"{env} ({flag})"


_FIXES = {
    "worker_index": "set it to the pod's worker index, an integer from 0 (LWS sets it from the "
    "leaderworkerset.sigs.k8s.io/worker-index label)",
    "group_size": "set it to the LWS group size, a positive integer (leaderWorkerTemplate.size)",
    "tpu_worker_id": "it must be a non-negative integer (LWS injects it on TPU pods)",
    "pod_ip": "set it from the downward API (fieldRef: status.podIP)",
    "gpus_per_node": "set it to the number of accelerator devices in the pod, a positive integer",
    "extra_env": 'give a JSON object of strings, e.g. {"VLLM_LOGGING_LEVEL": "DEBUG"}',
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
        return Settings(**given)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            field = _field_of(err["loc"])
            shown = REDACTED if field == "extra_env" else repr(err.get("input"))
            problems.append(
                Problem(
                    setting_label(field),
                    f"{err['msg'].removeprefix('Value error, ').lower()} (got {shown})",
                    _FIXES.get(field, "correct the value"),
                )
            )
        raise ConfigError(problems) from None
    except SettingsError as exc:
        # pydantic-settings raises this when a complex value (LLMD_EXTRA_ENV) is not JSON.
        field = next((f for f in Settings.model_fields if f'"{f}"' in str(exc)), "extra_env")
        raise ConfigError.one(
            setting_label(field), "is not valid JSON", _FIXES.get(field, "correct the value")
        ) from None
