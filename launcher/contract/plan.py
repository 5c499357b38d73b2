"""The Plan: frozen data saying exactly what one pod runs. Built by roles/, rendered or supervised."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, replace
from enum import Enum

from launcher.contract.capabilities import CapabilitiesHeld, CapabilityWatch
from launcher.contract.record import record

# Shown where a value is only known inside the pod (kubelet's own $(VAR) notation).
LEADER_PLACEHOLDER = "$(LWS_LEADER_ADDRESS)"
POD_IP_PLACEHOLDER = "$(POD_IP)"
# The network interface that holds POD_IP: found by preflight inside the pod, filled in before spawning.
IFNAME_PLACEHOLDER = "$(LLMD_POD_IFNAME)"


class RoleKind(str, Enum):
    LEADER = "leader"  # group index 0 of an engine spanning the group: serves the API
    WORKER = "worker"  # group index >0 of such an engine: headless
    DP_RANKS = "dp-ranks"  # owns a slice of data-parallel ranks; every pod serves
    SERVICE = "service"  # a standalone service pod (Mooncake master, donor)


class PdRole(str, Enum):
    """A pod's part in P/D disaggregation, whose work its step counters follow. The value is what the
    dry-run prints and the `role` label of the launcher's P/D metrics (healthchecks/metrics.py)."""

    DECODE = "decode"
    PREFILL = "prefill"
    BOTH = "prefill and decode"  # no P/D, kv_both, or a mix

    def __str__(self) -> str:
        return self.value


@record
class Parallelism:
    """How one engine's accelerators are laid out over the pods of its LWS group: TP x PP per engine,
    times the DP ranks each pod owns. The layouts modelled (docs/recipes.md): TP and PP inside one
    pod; TP inside each pod with the pipeline stages across pods (vLLM's and SGLang's multi-node
    layout: ranks are numbered TP-first, pp_rank * tp + tp_rank, and a pod holds consecutive ranks);
    TP itself across pods; DP ranks across pods."""

    tensor: int = 1
    pipeline: int = 1
    local_dp: int = 1  # DP ranks per pod (vLLM's layout data-parallel); each rank has TP x PP devices
    nodes: int = 1

    @property
    def devices_per_pod(self) -> int:
        if self.local_dp > 1:
            return self.tensor * self.pipeline * self.local_dp
        return self.tensor * self.pipeline // self.nodes

    @property
    def spans_pods(self) -> str | None:
        """The dimension that crosses pods: data, pipeline or tensor; None in a single pod."""
        if self.nodes == 1:
            return None
        if self.local_dp > 1:
            return "data"
        return "pipeline" if self.devices_per_pod % self.tensor == 0 else "tensor"

    def problem(self) -> str | None:
        """Why the pods cannot hold this layout, or None."""
        devices = self.tensor * self.pipeline
        if self.local_dp > 1 or self.nodes == 1:
            return None
        if devices % self.nodes:
            return f"{self.words()} = {devices} devices cannot be split evenly over {self.nodes} pods"
        per_pod = devices // self.nodes
        if per_pod % self.tensor and self.tensor % per_pod:
            return (
                f"{self.words()} over {self.nodes} pods puts {per_pod} devices in a pod, so a TP group "
                f"of {self.tensor} would split a pod; make TP divide or be a multiple of {per_pod}"
            )
        return None

    def words(self) -> str:
        parts = [f"TP {self.tensor}", f"PP {self.pipeline}"]
        if self.local_dp > 1:
            parts.append(f"{self.local_dp} local DP ranks")
        return " x ".join(parts)

    def describe(self) -> str:
        """One line for the plan: the product, and which dimension spans the pods."""
        spans = self.spans_pods
        if spans is None:
            return f"{self.words()} = {_devices(self.devices_per_pod)} in one pod"
        if spans == "data":
            per_pod = _devices(self.devices_per_pod)
            return f"{self.words()} = {per_pod} per pod; DP ranks across {self.nodes} pods"
        head = f"{self.words()} = {_devices(self.tensor * self.pipeline)}, {self.devices_per_pod} per pod"
        if spans == "pipeline":
            stages = self.pipeline // self.nodes
            per_pod = f"{stages} stage{'s' * (stages > 1)} per pod"
            return f"{head}: TP within each pod, PP across {self.nodes} pods ({per_pod})"
        return f"{head}: TP across {self.tensor // self.devices_per_pod} pods per stage"


def _devices(count: int) -> str:
    return f"{count} device{'s' * (count != 1)}"


@record
class Role:
    """Which job this pod does, derived from the pool and the LWS env alone."""

    pool: str
    kind: RoleKind
    worker_index: int = 0
    group_size: int = 1
    leader_address: str | None = None
    dp_ranks: range | None = None  # the global DP ranks this pod owns (data-parallel pools)
    dp_size: int | None = None  # DP ranks in the whole group
    parallelism: Parallelism | None = None  # an engine's layout over the group (None: a service)

    @property
    def name(self) -> str:
        if self.kind in (RoleKind.LEADER, RoleKind.WORKER):
            return f"{self.pool}-{self.kind.value}"
        return self.pool


@record
class PodIdentity:
    """Downward-API names of the pod, for the people reading a plan or its logs."""

    name: str | None = None
    namespace: str | None = None
    node: str | None = None


@record
class PortSpec:
    number: int
    name: str


@record
class HttpCheck:
    """How the probe server learns this process is healthy: GET path on a local port, 200 = ok."""

    port: int
    path: str


@record
class TcpCheck:
    """Reachable = a TCP connection opens: how a worker learns its leader's API is up."""

    host: str
    port: int


@record
class EventsFlowing:
    """Passes until the engine served a request without publishing KV events (healthchecks/kvevents/)."""


@record
class Check:
    """One condition the probe server watches. Its process must be running; then the request, if any,
    must pass. No request: the process running is the whole check (a headless worker's engine)."""

    name: str
    process: str
    request: HttpCheck | TcpCheck | EventsFlowing | CapabilitiesHeld | None = None


@record
class Peer:
    """Another pod of this pod's LWS group, watched through its launcher's /livez. A peer that answered
    once and then stops answering ends this pod too, so LWS recreates the group now, not when the
    engine notices on its next request (vLLM's leader answers /health 200 with its worker gone)."""

    name: str  # "leader", "worker 1"
    host: str  # its DNS name, resolved at every check
    port: int  # its launcher's probe port


@record
class ProgressSource:
    """One API server whose engine's token counters the launcher reads, and canaries when they stand still."""

    name: str  # "engine", "rank 3": named in /livez and the termination message
    port: int  # its API port: GET /metrics, POST the canary


@record
class Canary:
    """The smallest request the engine's runner serves (a one-token completion, or one pooled input):
    its answer proves the engine core worked. The key it sends is the value of `api_key_env` in the
    engine's own environment, read by the launcher at run time: never in the plan, argv or output."""

    path: str  # POSTed on each source's port
    body: Mapping[str, object]  # JSON: the served model and the tiniest input
    api_key_env: str | None  # the engine's variable holding the API key it enforces (None: it reads none)
    key_fix: str  # told once when the engine refuses the canary's key (401, 403)
    path_fix: str  # told once when it serves no such path or model (404)


@record
class PdCanary:
    """The P/D two-step path proved end to end: the forward watch's canary POSTed to the pod's disagg sidecar
    with the `x-prefiller-host-port` header, the header the router sets with its choice of prefill pod
    (llm-d/llm-d-router pkg/sidecar/proxy/proxy.go). The sidecar runs the prompt on that prefill
    endpoint, then the decode leg on this pod's engine with the KV the connector (NIXL) moved. Its
    outcome is counted and shown, never a verdict: its failure is as often the peer's as this pod's."""

    prefiller: str  # host:port of the prefill endpoint the sidecar is told to use (LLMD_PD_CANARY_PREFILLER)
    port: int  # the sidecar's port on this pod
    tls: bool  # the sidecar serves TLS (its self-signed certificate is not verified: it is this pod's own)


@record
class StepWatch:
    """A busy engine judged by its steps: while requests run, the samples in `signals` move on every
    engine step that does this role's work (healthchecks/forward.py). Requests running and none of them
    moved for `seconds`: stalled, no canary needed. Only running requests count: a request waiting
    (queued, or for its KV from a P/D peer) makes no step of this engine's."""

    signals: tuple[str, ...]  # sample selectors (`name` or `name{label="value"}`) that move per step
    running: tuple[str, ...]  # gauges of the requests the engine is stepping: > 0 is in flight
    seconds: float  # the bound: requests running and no step this long is a stall
    why: str  # where the signals come from, for the plan (engine, file, what each counts)


@record
class ProgressWatch:
    """Forward progress of the serving engine (healthchecks/forward.py). The engine's own token
    counters must advance; when they have not for `stall_seconds` and no request is running or
    waiting (`busy`), one canary must come back within `canary_seconds`, or the engine is stalled and
    the pod ends; while requests run, `steps` judges. A canary the engine refuses (4xx) is wrong, not
    a stall. Headless workers have no API: a stalled worker stops the leader's steps, so the leader's
    watch covers them (`covers`)."""

    sources: tuple[ProgressSource, ...]
    counters: tuple[str, ...]  # the engine's token counters, as named on its /metrics
    canary: Canary
    stall_seconds: float
    canary_seconds: float
    busy: tuple[str, ...] = ()  # its /metrics gauges of running and waiting requests: > 0 is busy
    covers: tuple[str, ...] = ()  # the group's headless pods whose stall this watch sees
    role: PdRole = PdRole.BOTH  # the pod's part in P/D, whose work the counters follow
    steps: StepWatch | None = None  # a busy engine's judge (None: busy time is not judged)


@record
class PhasePattern:
    """An engine output line holding `text` means start-up reached `phase` (launcher/contract/phases.py)."""

    text: str
    phase: str


@record
class RefusalShapes:
    """What in an engine's last output, besides Python's own argparse and exception lines, says it
    refused its configuration (launcher/supervise/refusal.py): regexes, from its EngineFamily."""

    line_prefix: str  # what its worker processes put before each line; "" none
    config_modules: str  # the paths of its config-check modules: an AssertionError raised there counts


@record
class StartupOutput:
    """How the engine's own output says which start-up phase it is in (healthchecks/progress.py), and
    how its last words say it refused its configuration."""

    engine: str  # whose output it is: named by the dry-run
    phases: tuple[PhasePattern, ...]
    refusal: RefusalShapes | None = None


@record
class Probes:
    """What the launcher's probe server answers from (healthchecks/)."""

    port: int  # the launcher's own /livez /readyz /startupz /metrics
    ready: tuple[Check, ...]  # all pass (and no stop has begun) = ready
    started: Check  # its first pass ends start-up: the engine answered once, or the leader came up
    progress: StartupOutput | None = None  # how start-up progress is read from the engine's output
    peers: tuple[Peer, ...] = ()  # the group's other pods whose loss ends this pod
    peer_lost_seconds: float = 0.0  # how long a peer that answered once may fail before it counts as lost
    forward: ProgressWatch | None = None  # this pod's serving engine, watched for forward progress
    forward_watched_by: str | None = None  # a headless pod: whose watch sees its stall
    # Beside the forward watch, never a verdict: the connector's KV-transfer counters, read on its
    # /metrics reads and relayed into the launcher's /metrics by name (healthchecks/kv_transfer.py);
    # the P/D canary, sent every stall_seconds through the disagg sidecar (healthchecks/pd_canary.py).
    kv_transfer: tuple[str, ...] = ()
    pd_canary: PdCanary | None = None
    startup_seconds: float = 0.0  # start-up not ended this long after launch ends the pod (0: never)


@record
class KvEventSource:
    """One local rank's KV-event publisher, as the launcher's watcher subscribes to it."""

    rank: int  # global DP rank
    port: int  # where it publishes on this pod (base compensated for the pod's first rank)
    replay_port: int | None  # its replay endpoint, if configured
    api_port: int  # the rank's API port: its /metrics says whether it serves requests
    # IPv6 pod: the engine publishes on these ipc:// endpoints and the launcher relays them on
    # dual-stack tcp://*:port and replay_port (vLLM 0.32 binds tcp://*:N IPv4-only).
    ipc: str | None = None
    replay_ipc: str | None = None


@record
class KvIdentity:
    """What makes a KV block the same block in two pods: pools that hand KV to each other (NIXL, the
    Mooncake store) or share a router must agree on all three, and pools planned from different recipes
    cannot be compared at load time. The launcher exports it (llmd_launcher_kv_cache_identity) so a
    rule over every pod of a model finds the pool that disagrees before its cache silently misses."""

    model: str  # the engine's model string (NIXL's compatibility hash includes it)
    block_size: int | None  # the engine's --block-size as planned; None: the engine's default
    hash_seed: str  # the first 12 hex digits of sha256(PYTHONHASHSEED), or "unset" (a random seed)


@record
class KvEventsWatch:
    sources: tuple[KvEventSource, ...]
    silence_seconds: float  # no batch this long while requests were served = silent
    readiness: bool = False  # the pod is not ready while its events are silent
    block_size: int | None = None  # the router's blockSizeTokens, which BlockStored events must carry
    block_size_readiness: bool = False  # the pod is not ready while they carry another
    identity: KvIdentity | None = None  # exported beside the block size the events really carry
    # The engine's /metrics families whose sum grows when it serves a request: silence is a stream
    # that stopped only while this moves.
    served_metrics: tuple[str, ...] = ()


@record
class ProcessSpec:
    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)  # added to the pod's environment
    critical: bool = True  # the engine: its exit ends the pod. Sidecars restart with backoff.
    ports: tuple[PortSpec, ...] = ()
    health: HttpCheck | TcpCheck | None = None


@record
class FileSpec:
    path: str
    content: str
    mode: int = 0o644


# The shares of the grace period, declared once: what the budget below computes, and what the notes,
# the settings' help and the generated reference say (in words: share_words).
DEREGISTER_SHARE = 6  # deregistration takes at most grace / 6, so a short grace keeps most for the drain
SIDECAR_SHARE = 6  # the sidecars' window after the engine: grace / 6, at most BUDGET_CAP seconds
KILL_MARGIN_SHARE = 10  # SIGKILL this share of the grace before the kubelet would, at most BUDGET_CAP
BUDGET_CAP = 5  # seconds
_SHARE_WORDS = {4: "a quarter", 6: "a sixth", 10: "a tenth"}


def share_words(share: int) -> str:
    """`a sixth` for 6: how the notes and the help text say a share of the grace period."""
    return _SHARE_WORDS.get(share, f"1/{share}")


@record
class ShutdownBudget:
    """How the pod's termination grace period is split between the engine's drain, the sidecars and
    the final SIGKILL. The plan uses it for the engine's --shutdown-timeout and the supervisor for its
    deadlines, so the two always agree. After SIGTERM reaches the launcher (t = 0):

        0 not ready ── deregister: SIGTERM engine ── drain (--shutdown-timeout) ── teardown
          ── engine_deadline ── SIGTERM sidecars (sooner if the engine is gone) ── kill_at: SIGKILL
          what is left ── grace

    `deregister`: /readyz is 503 from t = 0, but endpoints, the router and kube-proxy take a few
    seconds to stop sending (KServe's preStop sleep exists for this); the engine keeps serving until
    then, so nothing sent meanwhile is refused.
    """

    grace: int  # seconds from SIGTERM until the kubelet SIGKILLs the pod
    kill_margin: float  # SIGKILL this long before the kubelet would, so exit codes and logs are ours
    sidecar_window: float  # time the sidecars get after the engine
    teardown: int  # engine time after its drain (vLLM's DP supervisor waits drain + 5 s)
    deregister: int = 0  # not ready, still serving, before the engine is signalled

    @classmethod
    def from_grace(cls, grace: int, deregister: int = 0) -> ShutdownBudget:
        if grace < KILL_MARGIN_SHARE:  # whole seconds would leave the engine nothing: a tenth each
            kill_margin = sidecar_window = round(grace / KILL_MARGIN_SHARE, 3)
        else:
            kill_margin = min(BUDGET_CAP, grace // KILL_MARGIN_SHARE)
            sidecar_window = min(BUDGET_CAP, grace // SIDECAR_SHARE)
        engine_window = max(0.0, grace - kill_margin - sidecar_window)
        budget = cls(grace, kill_margin, sidecar_window, int(min(BUDGET_CAP, engine_window // 4)))
        return replace(budget, deregister=max(0, min(deregister, grace // DEREGISTER_SHARE)))

    @property
    def kill_at(self) -> float:
        return max(0, round(self.grace - self.kill_margin, 3))

    @property
    def engine_deadline(self) -> float:
        return max(0, round(self.kill_at - self.sidecar_window, 3))

    @property
    def drain(self) -> int:
        """The engine's --shutdown-timeout (whole seconds): how long it may finish in-flight requests."""
        return max(0, int(self.engine_deadline - self.teardown - self.deregister))


@record
class DerivedEnv:
    """An engine env value the launcher sets, and where it came from (the dry-run shows both)."""

    process: str
    name: str
    source: str


@record
class ModuleNeed:
    """A Python module the engine will import because of the plan, and the package that provides it."""

    module: str
    package: str
    why: str  # the flag or connector that needs it


@record
class MemoryItem:
    """Host memory the pod will allocate (pinned: registered for RDMA, so RLIMIT_MEMLOCK counts it)."""

    what: str
    size: int  # bytes, all processes together
    processes: int = 1  # how many processes each hold size / processes
    pinned: bool = False


@record
class RdmaPort:
    """One active RDMA port of the pod (launcher/supervise/host/rdma.py reads it from sysfs)."""

    device: str  # the HCA, e.g. mlx5_0
    port: int
    link_layer: str  # "InfiniBand" or "Ethernet" (RoCE)
    netdev: str | None = None  # the network interface it sits on, when sysfs says
    gid_index: int | None = None  # RoCE: the GID index of this port's RoCE v2 address

    @property
    def name(self) -> str:
        """device:port, as NCCL_IB_HCA and UCX_NET_DEVICES spell it."""
        return f"{self.device}:{self.port}"


@record
class RdmaNeed:
    """The plan names its RDMA devices from the ports the pod has (found by preflight, filled in by
    roles.needs.fill_rdma); a plan whose transfers cannot work without one says why."""

    env: tuple[str, ...] = ()  # engine env variables filled in from the ports (unless the recipe set them)
    required_by: str | None = None  # e.g. "pools.prefill.mooncake_store.config.protocol rdma"
    fix: str = ""  # how to run without RDMA, for the refusal
    device_flag: str | None = None  # an argv word `--flag=` left empty gets the device names
    device_file_env: str | None = None  # names the JSON config whose empty device_name gets them


@record
class StoreMaster:
    """The KV store's master (Mooncake's) a pod's store client registers with: checked before start,
    watched after (healthchecks/store_master.py)."""

    name: str  # how people call it, in problems and logs
    rpc: str  # host:port of its RPC
    metadata_server: str | None  # its HTTP metadata server URL (None: not HTTP)
    setting: str  # the recipe field that names it
    fix: str  # what to do when it is not there
    # Its metadata comes back empty when it restarts: True, the client must register again (restart);
    # False, it is reported only (why: where the family declares it).
    reregister: bool


@record
class HostNeeds:
    """What the host the pod lands on must provide; derived from the plan, checked by preflight."""

    modules: tuple[ModuleNeed, ...] = ()
    memory: tuple[MemoryItem, ...] = ()
    model_files: bool = False  # the engine loads a local checkpoint: check it is complete
    drafter: str | None = None  # --speculative-config's model, which must be staged when offline
    engine_package: str | None = None  # the distribution the flag catalogue was generated from
    catalog_version: str | None = None
    catalog_source: str | None = None  # "built-in", or the file the image built it into
    engine_versions: str | None = None  # the recipe pool's specifier (e.g. >=0.32,<0.34) preflight checks
    network: bool = False  # derive the interface that holds POD_IP
    host_ip_var: str | None = None  # the engine's own "my IP" variable, which holds POD_IP
    ifname_vars: tuple[str, ...] = ()  # its transports' interface variables (gloo, NCCL), checked too
    shm_segments: tuple[str, ...] = ()  # regexes of the shared-memory files the engine leaves on a crash
    derived_env: tuple[DerivedEnv, ...] = ()
    rdma: RdmaNeed | None = None  # the plan names RDMA devices (None: it uses none)
    store_master: StoreMaster | None = None  # the KV store's master, reachable before start
    # Why /dev/shm must not be shared with another pod of the group that has its own network (None:
    # nothing to check). Preflight checks it with a marker per pod; the manifest is not visible here.
    private_shm: str | None = None
    advisory: tuple[str, ...] = ()  # checks the recipe marks advisory: a warning, not a refusal
    accelerators: int | None = None  # devices the pod must see (None: a CPU pool, nothing to count)

    @property
    def host_bytes(self) -> int:
        return sum(m.size for m in self.memory)

    @property
    def pinned_per_process(self) -> int:
        """The most any one process registers: RLIMIT_MEMLOCK is a per-process limit."""
        return sum(m.size // m.processes for m in self.memory if m.pinned)


@record
class Plan:
    recipe: str
    role: Role
    pod: PodIdentity
    processes: tuple[ProcessSpec, ...]
    shutdown: ShutdownBudget  # the grace period's timeline, shown by the dry-run, kept by the supervisor
    probes: Probes  # what the probe server answers from: every pod has its rules
    files: tuple[FileSpec, ...] = ()
    notes: tuple[str, ...] = ()
    placeholders: tuple[str, ...] = ()  # values only the pod knows, shown as $(VAR)
    model_path: str | None = None  # where the engine loads weights from: a directory or a hub id
    kv_events: KvEventsWatch | None = None  # the publishers the launcher watches
    needs: HostNeeds = field(default_factory=HostNeeds)  # what preflight checks on the host
    capabilities: CapabilityWatch | None = None  # what the pod promises its router, checked while it runs

    @property
    def engine(self) -> ProcessSpec:
        return self.processes[0]

    @property
    def ports(self) -> list[tuple[str, PortSpec]]:
        return [(p.name, port) for p in self.processes for port in p.ports]

    def port_clashes(self) -> list[str]:
        """Ports declared twice inside this pod (the second process would fail to bind), e.g. "8201 is
        both engine http-rank1 and engine kv-events-rank0". Whether a port is free is preflight's."""
        seen: dict[int, str] = {}
        clashes = []
        for process, port in self.ports:
            label = f"{process} {port.name}"
            if port.number in seen:
                clashes.append(f"{port.number} is both {seen[port.number]} and {label}")
            seen[port.number] = label
        return clashes


@record
class GroupCheck:
    """One check of a whole LWS group (`plan --group`)."""

    name: str
    ok: bool
    detail: str


@record
class GroupReport:
    plans: tuple[Plan, ...]
    checks: tuple[GroupCheck, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def notes(self) -> list[str]:
        return list(dict.fromkeys(n for p in self.plans for n in p.notes))
