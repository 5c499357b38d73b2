"""EngineFamily: everything the launcher knows about one engine family, in one place.

Each module beside this one exports one descriptor; `roles.engines` maps a recipe pool class to it.
Whatever the runtime needs (start-up phases, counters, metric names, shm names) reaches it through
the Plan, so `healthchecks/` and `launcher/supervise/` hold no engine facts (docs/adding-an-engine.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from launcher.contract.plan import (
    MemoryItem,
    PdRole,
    PhasePattern,
    Plan,
    RdmaNeed,
    RefusalShapes,
    StartupOutput,
    StepWatch,
    StoreMaster,
)
from launcher.contract.record import record

if TYPE_CHECKING:
    from roles.context import BuildContext
    from roles.engines.capability_adapter import CapabilityAdapter

P = TypeVar("P")


def no_host_memory(pool: Any, where: str) -> list[MemoryItem]:
    return []


def no_rdma(pool: Any, where: str) -> RdmaNeed | None:
    return None


def no_master(pool: Any, where: str) -> StoreMaster | None:
    return None


def release(version: str) -> tuple[int, ...]:
    """0.33.0+cpu -> (0, 33, 0): the numeric release, enough to order an engine's versions (packaging
    stays out of the dry-run's imports)."""
    found = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in found.group().split(".")) if found else ()


@record
class PhaseLines:
    """The output lines that announce start-up phases in a range of an engine's releases: read from real
    start-up logs of those releases (tests/fixtures/startup-logs/), [since, before)."""

    since: str
    before: str
    patterns: tuple[PhasePattern, ...]

    def holds_for(self, version: str) -> bool:
        return release(self.since) <= release(version) < release(self.before)


@record
class StepSignals:
    """What moves on every step of an engine's scheduler, by the work the step does, read from its
    source (`source`, for the plan). A decode pod watches only its decode signals (its prompt side may
    move while decode is deadlocked), a prefill pod in P/D its prefill ones, any other pod both."""

    decode: tuple[str, ...]
    prefill: tuple[str, ...]
    running: tuple[str, ...]  # gauges of the requests being stepped
    source: str

    def signals(self, role: PdRole) -> tuple[str, ...]:
        """The signals of the work a pod of this P/D role does."""
        return {PdRole.DECODE: self.decode, PdRole.PREFILL: self.prefill}.get(role) or tuple(
            dict.fromkeys((*self.decode, *self.prefill))
        )

    def watch(self, role: PdRole, seconds: float) -> StepWatch | None:
        """The pod's StepWatch (None when seconds is 0: busy time is not judged)."""
        if seconds <= 0:
            return None
        return StepWatch(self.signals(role), self.running, seconds, self.source)


@record
class EnvSwitch:
    """An env variable the engine reads as on/off, parsed as the engine parses it."""

    name: str
    on: tuple[str, ...]  # the lower-cased values it takes as on; anything else (or unset) is off
    strips: bool = False  # whether it strips whitespace before comparing

    def is_on(self, env: Mapping[str, str]) -> bool:
        value = env.get(self.name)
        return value is not None and (value.strip() if self.strips else value).lower() in self.on


@record
class EngineFamily(Generic[P]):
    name: str  # how the dry-run names the engine whose output it reads
    pools: tuple[type[P], ...]  # its recipe pool class(es), launcher/config/recipe.py
    build: Callable[[BuildContext, P], Plan]  # the pod's plan for one of those pools
    # What a pod of the pool allocates on the host besides recipe host.engine_memory ("where" names
    # the recipe field in errors): Mooncake segments, host caches.
    host_memory: Callable[[P, str], list[MemoryItem]] = no_host_memory
    # How a pool's transfers name RDMA devices besides the engine's NCCL/UCX variables (a store
    # client's device list and GID variable), and what in it cannot work without one (required_by).
    rdma: Callable[[P, str], RdmaNeed | None] = no_rdma
    # The KV store's master a pod of the pool registers with (its store client), checked and watched.
    store_master: Callable[[P, str], StoreMaster | None] = no_master
    catalog: str | None = None  # <catalog>-<version>.json: the flags recipe args are checked against
    # The built-in catalogue used when no catalogue has the installed engine's version: the release
    # the engine tier runs (tests/engines/test_flag_catalogs.py).
    catalog_version: str = ""
    package: str | None = None  # the distribution the catalogues are generated from
    host_ip_var: str | None = None  # the engine's own "my IP" variable, set to POD_IP
    # The prefixes of the env variables it and the libraries under it read (`<PREFIX>_...`): a Service
    # link there is refused (service_links.py), a refusal naming one needs a new pod (parking.py).
    env_prefixes: tuple[str, ...] = ()
    # --kv-transfer-config connector class -> (the module the engine imports for it, its package)
    connector_modules: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # --load-format value -> (the module the engine imports for it, its package)
    load_format_modules: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    busy_gauges: tuple[str, ...] = ()  # its /metrics gauges of running and waiting requests
    steps: StepSignals | None = None  # what moves on each of its steps (None: none exposed)
    # The environment variable it reads the API key it enforces from (None: only a flag, which the
    # launcher keeps off argv); the forward-progress canary sends that key.
    api_key_env: str | None = None
    served_metrics: tuple[str, ...] = ()  # its /metrics families that grow with requests served
    startup_phases: tuple[PhaseLines, ...] = ()  # output lines that announce a start-up phase, by release
    refusal: RefusalShapes | None = None  # how its last output says it refused its configuration
    ready_timeout_env: str | None = None  # its own start-up timeout, raised to the launcher's deadline
    shm_segments: tuple[str, ...] = ()  # regexes of the /dev/shm files it leaves behind when it crashes
    # Why pods of one group must not share /dev/shm unless they share the network (None: no such trap).
    shm_across_pods: str | None = None
    capabilities: CapabilityAdapter | None = None  # how it exposes the capability vocabulary
    # Env switches with which it serves a context past the model's max_position_embeddings, warning
    # instead of refusing (roles/engines/model_config.py then lets it through too).
    longer_context: tuple[EnvSwitch, ...] = ()

    def phase_lines(self, version: str | None) -> PhaseLines | None:
        """The range holding the engine's release; None when no range does."""
        return next((r for r in self.startup_phases if version and r.holds_for(version)), None)

    def startup_output(self, version: str | None) -> StartupOutput | None:
        """How the output of this release tells its start-up phase. A release outside every range reads
        the newest range's lines: a line it no longer prints leaves the phase unknown, never a wrong one
        (healthchecks/progress.py), and the plan says so (roles/__init__.py)."""
        if not self.startup_phases:
            return None
        lines = self.phase_lines(version) or self.startup_phases[-1]
        return StartupOutput(self.name, lines.patterns, self.refusal)
