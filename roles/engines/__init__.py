"""The engine registry: each recipe pool class -> the one EngineFamily that knows that engine.

Adding an engine is one module here (its descriptor and plan builder), one flag catalogue in
roles/catalogs/ and one pool class in the recipe schema (docs/adding-an-engine.md).
"""

from __future__ import annotations

from typing import Any

from launcher.config.recipe import Pool
from roles.engines.family import EngineFamily
from roles.engines.mooncake import MOONCAKE
from roles.engines.sglang import SGLANG
from roles.engines.vllm import VLLM

FAMILIES: tuple[EngineFamily[Any], ...] = (VLLM, SGLANG, MOONCAKE)
# Every env prefix an engine the launcher runs reads (EngineFamily.env_prefixes), each once.
ENGINE_ENV_PREFIXES = tuple(dict.fromkeys(prefix for family in FAMILIES for prefix in family.env_prefixes))
# Every env switch an engine reads that the launcher's own checks honour, each once: the running pod
# reads these from its container's env (launcher/run.py), which the engine inherits.
ENGINE_SWITCHES = tuple(dict.fromkeys(switch.name for family in FAMILIES for switch in family.longer_context))
_BY_POOL: dict[type, EngineFamily[Any]] = {pool: family for family in FAMILIES for pool in family.pools}


def family_of(pool: Pool) -> EngineFamily[Any]:
    """The family a recipe pool belongs to (tests/unit/roles/test_engine_registry.py: every pool
    class of the schema has exactly one)."""
    return _BY_POOL[type(pool)]
