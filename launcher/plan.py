"""The Plan: frozen data saying exactly what one pod runs. Built by roles/, rendered or supervised."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

# Shown where a value is only known inside the pod (kubelet's own $(VAR) notation).
LEADER_PLACEHOLDER = "$(LWS_LEADER_ADDRESS)"
POD_IP_PLACEHOLDER = "$(POD_IP)"


class RoleKind(str, Enum):
    LEADER = "leader"  # group index 0 of an engine spanning the group: serves the API
    WORKER = "worker"  # group index >0 of such an engine: headless
    DP_RANKS = "dp-ranks"  # owns a slice of data-parallel ranks; every pod serves
    SERVICE = "service"  # a standalone service pod (Mooncake master, donor)


@dataclass(frozen=True)
class Role:
    """Which job this pod does, derived from the pool and the LWS env alone."""

    pool: str
    kind: RoleKind
    worker_index: int = 0
    group_size: int = 1
    leader_address: str | None = None
    dp_ranks: range | None = None  # the global DP ranks this pod owns (data-parallel pools)
    dp_size: int | None = None  # DP ranks in the whole group

    @property
    def name(self) -> str:
        if self.kind in (RoleKind.LEADER, RoleKind.WORKER):
            return f"{self.pool}-{self.kind.value}"
        return self.pool


@dataclass(frozen=True)
class PodIdentity:
    """Downward-API names of the pod, for the people reading a plan or its logs."""

    name: str | None = None
    namespace: str | None = None
    node: str | None = None


@dataclass(frozen=True)
class PortSpec:
    number: int
    name: str


@dataclass(frozen=True)
class HttpCheck:
    """How the probe server learns this process is healthy: GET path on a local port, 200 = ok."""

    port: int
    path: str


@dataclass(frozen=True)
class TcpCheck:
    """Reachable = a TCP connection opens: how a worker learns its leader's API is up."""

    host: str
    port: int


@dataclass(frozen=True)
class EventsFlowing:
    """Passes until the engine served a request without publishing KV events (launcher/kvevents.py)."""


@dataclass(frozen=True)
class Check:
    """One condition the probe server watches. Its process must be running; then the request, if any,
    must pass. No request: the process running is the whole check (a headless worker's engine)."""

    name: str
    process: str
    request: HttpCheck | TcpCheck | EventsFlowing | None = None


@dataclass(frozen=True)
class Probes:
    """What the launcher's probe server answers from (healthchecks/)."""

    port: int  # the launcher's own /livez /readyz /startupz /metrics
    ready: tuple[Check, ...]  # all pass (and no stop has begun) = ready
    started: Check  # its first pass ends start-up: the engine answered once, or the leader came up
    progress: str | None = None  # which parser reads start-up progress from the engine's output


@dataclass(frozen=True)
class KvEventSource:
    """One local rank's KV-event publisher, as the launcher's watcher subscribes to it."""

    rank: int  # global DP rank
    port: int  # where it publishes on this pod (base compensated for the pod's first rank)
    replay_port: int | None  # its replay endpoint, if configured
    api_port: int  # the rank's API port: its /metrics says whether it serves requests


@dataclass(frozen=True)
class KvEventsWatch:
    sources: tuple[KvEventSource, ...]
    silence_seconds: float  # no batch this long while requests were served = silent
    readiness: bool = False  # the pod is not ready while its events are silent


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)  # added to the pod's environment
    critical: bool = True  # the engine: its exit ends the pod. Sidecars restart with backoff.
    ports: tuple[PortSpec, ...] = ()
    health: HttpCheck | None = None


@dataclass(frozen=True)
class FileSpec:
    path: str
    content: str
    mode: int = 0o644


@dataclass(frozen=True)
class Plan:
    recipe: str
    role: Role
    pod: PodIdentity
    processes: tuple[ProcessSpec, ...]
    files: tuple[FileSpec, ...] = ()
    notes: tuple[str, ...] = ()
    placeholders: tuple[str, ...] = ()  # values only the pod knows, shown as $(VAR)
    model_path: str | None = None  # where the engine loads weights from: a directory or a hub id
    probes: Probes | None = None  # set by roles.build_plan for every pod
    kv_events: KvEventsWatch | None = None  # the publishers the launcher watches

    @property
    def engine(self) -> ProcessSpec:
        return self.processes[0]

    @property
    def ports(self) -> list[tuple[str, PortSpec]]:
        return [(p.name, port) for p in self.processes for port in p.ports]
