"""/metrics: the launcher's view of the pod, read from PodHealth, the supervisor and each watcher at
scrape time (so it can never disagree with the probes), plus the probe latency histogram. Each watcher
builds its own families (Watcher.metrics) from the declarations here.

Every metric is declared once in METRICS (name, type, help, labels); the collector builds its families
from those declarations and docs/reference/metrics.md is generated from them (scripts/generate_docs.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from healthchecks.state import PodHealth
from launcher.contract.exits import exit_code_of
from launcher.contract.lifecycle import Lifecycle
from launcher.contract.phases import PHASES
from launcher.contract.plan import ProcessSpec

PREFIX = "llmd_launcher_"
PROBE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass(frozen=True)
class MetricSpec:
    """One metric as scrapers see it; its families are built from here, never from literals."""

    name: str  # without PREFIX
    kind: Literal["gauge", "counter", "histogram"]
    help: str
    labels: tuple[str, ...] = ()

    @property
    def full_name(self) -> str:
        return PREFIX + self.name

    @property
    def exposed(self) -> str:
        """The sample name in the exposition: counters end in _total (OpenMetrics)."""
        return self.full_name + "_total" if self.kind == "counter" else self.full_name

    def family(self) -> GaugeMetricFamily | CounterMetricFamily:
        kind = GaugeMetricFamily if self.kind == "gauge" else CounterMetricFamily
        return kind(self.full_name, self.help, labels=list(self.labels))

    def value(self, value: float) -> GaugeMetricFamily:
        """A gauge without labels, with its one value."""
        return GaugeMetricFamily(self.full_name, self.help, value=float(value))


PROCESS_UP = MetricSpec("process_up", "gauge", "1 while the process runs", ("process",))
PROCESS_RESTARTS = MetricSpec(
    "process_restarts", "counter", "restarts of a sidecar by the launcher", ("process",)
)
PROCESS_LAST_EXIT_CODE = MetricSpec(
    "process_last_exit_code",
    "gauge",
    "exit code of the process's last exit (128+N: killed by signal N)",
    ("process",),
)
PROCESS_STATE = MetricSpec(
    "process_state",
    "gauge",
    "1 for the process's life-cycle state (starting, running, backoff, stopping, exited, fatal)",
    ("process", "state"),
)
LIVE = MetricSpec("live", "gauge", "1 while no critical process has died")
READY = MetricSpec("ready", "gauge", "1 while every readiness check passes and no stop has begun")
CHECK_UP = MetricSpec("check_up", "gauge", "1 while the check passes", ("check",))
CHECK_DURATION = MetricSpec(
    "check_duration_seconds", "gauge", "how long the check's latest run took", ("check",)
)
STARTUP_PHASE = MetricSpec("startup_phase", "gauge", "1 for the pod's current phase", ("phase",))
STARTUP_DURATION = MetricSpec(
    "startup_duration_seconds", "gauge", "seconds from launch until start-up ended (so far, while it has not)"
)
WEIGHT_LOAD_PROGRESS = MetricSpec(
    "weight_load_progress_ratio", "gauge", "weight shards loaded over shards to load"
)
KV_EVENTS = MetricSpec("kv_events", "counter", "KV-cache events received", ("rank", "type"))
KV_EVENT_COUNTERS = {
    name: MetricSpec(f"kv_event_{name}", "counter", doc, ("rank",))
    for name, doc in (
        ("batches", "KV-event batches received (replayed ones included)"),
        ("gaps", "sequence gaps seen"),
        ("batches_missed", "batches found missing from the sequence"),
        ("batches_recovered", "missing batches the replay endpoint delivered"),
        ("batches_lost", "missing batches never delivered"),
        ("publisher_resets", "times the publisher's sequence restarted from 0"),
    )
}
KV_EVENT_LAST_BATCH = MetricSpec(
    "kv_event_last_batch_timestamp_seconds", "gauge", "Unix time the latest batch came", ("rank",)
)
KV_EVENT_SILENT = MetricSpec(
    "kv_event_silent", "gauge", "1 while no batch came although requests were served", ("rank",)
)
KV_EVENT_BLOCK_SIZE_MISMATCH = MetricSpec(
    "kv_event_block_size_mismatch",
    "gauge",
    "1 while BlockStored events carry another block_size than the router's blockSizeTokens",
    ("rank",),
)
KV_EVENT_BLOCK_SIZE = MetricSpec(
    "kv_event_block_size",
    "gauge",
    "the block_size the engine's latest BlockStored carried: pods that exchange KV or share a router "
    "must agree on it (count_values over every pod of a model)",
    ("rank",),
)
KV_CACHE_IDENTITY = MetricSpec(
    "kv_cache_identity",
    "gauge",
    "1, labelled with what the plan gives the engine: its model string, --block-size and "
    "sha256(PYTHONHASHSEED)[:12] (or unset); a pool whose labels differ from its KV peers' misses "
    "their cache",
    ("model", "block_size", "hash_seed"),
)
KV_EVENT_MALFORMED = MetricSpec(
    "kv_event_malformed", "counter", "messages that could not be decoded, by kind", ("kind",)
)
FORWARD_LAST_PROGRESS = MetricSpec(
    "forward_last_progress_timestamp_seconds",
    "gauge",
    "Unix time the engine's token counters last moved or a canary came back",
    ("source",),
)
FORWARD_LAST_STEP = MetricSpec(
    "forward_last_step_timestamp_seconds",
    "gauge",
    "Unix time the engine last made a step (its per-step signals moved) or had no request running; "
    "requests running and this older than LLMD_STEP_SECONDS is a stall",
    ("source",),
)
ENGINE_KV_TRANSFER = MetricSpec(
    "engine_kv_transfer",
    "counter",
    "the engine's KV-connector counters (the plan names them: failed transfers and notifications, "
    "expired KV, transfers, store operations and failed keys, connector prefix-cache queries and hits "
    "in tokens), relayed from its /metrics by the forward-progress watch",
    ("source", "pool", "role", "counter"),
)
FORWARD_STALLED = MetricSpec("forward_stalled", "gauge", "1 once the engine is judged stalled", ("source",))
FORWARD_CANARIES = MetricSpec(
    "forward_canaries",
    "counter",
    "canary requests sent, by outcome: ok (progress), failed (stall evidence: a timeout, no connection, "
    "a 5xx), refused (any other status: the canary is wrong, logged once with the fix, never a stall)",
    ("source", "outcome"),
)
PD_CANARIES = MetricSpec(
    "pd_canary",
    "counter",
    "canaries sent through the disagg sidecar to the prefill endpoint of LLMD_PD_CANARY_PREFILLER (prefill "
    "there, KV transfer, decode here), by outcome: ok, failed (a timeout, no connection, a 5xx: often the "
    "peer's fault), refused (any other status); never a verdict",
    ("pool", "role", "outcome"),
)
PEER_UP = MetricSpec("peer_up", "gauge", "1 while the group member's launcher answers /livez 200", ("peer",))
PEER_LAST_ANSWER = MetricSpec(
    "peer_last_answer_timestamp_seconds",
    "gauge",
    "Unix time the group member's launcher last answered /livez 200",
    ("peer",),
)
PEER_LOST = MetricSpec("peer_lost", "gauge", "1 once the group member is judged gone", ("peer",))
PEER_PARKED = MetricSpec(
    "peer_parked",
    "gauge",
    "1 while the group member's launcher says it is parked (this pod's start-up deadline is on hold)",
    ("peer",),
)
PARKED = MetricSpec(
    "parked",
    "gauge",
    "1 while this pod is parked on a mistake a restart cannot fix: the problem's setting, and whether "
    "it heals in place or by a rollout",
    ("setting", "heals"),
)
STARTUP_HELD = MetricSpec(
    "startup_held_seconds",
    "gauge",
    "seconds the start-up deadline was on hold (this pod or a peer parked); not counted against it",
)
CAPABILITY = MetricSpec(
    "capability",
    "gauge",
    "1 for the capability's state at its target (present, absent, unknown: not checked yet); level "
    "required gates readiness, expected only alerts",
    ("capability", "level", "target", "state"),
)
STORE_MASTER_UP = MetricSpec(
    "store_master_up", "gauge", "1 while the KV store master's metadata server answers", ("master",)
)
STORE_MASTER_RESTARTS = MetricSpec(
    "store_master_restarts",
    "counter",
    "restarts of the KV store master seen (its metadata server lost this pod's marker key)",
    ("master",),
)
LOG_LINES_DROPPED = MetricSpec(
    "log_lines_dropped",
    "counter",
    "output lines dropped because the reader of the launcher's stdout/stderr fell behind",
)
WATCHER_ERRORS = MetricSpec(
    "watcher_errors",
    "counter",
    "exceptions raised inside a watcher, by watcher: each logged in one line, the watcher started again "
    "a check interval later (a watcher that stops anyway ends the pod, exit 1)",
    ("watcher",),
)
PROBE_DURATION = MetricSpec(
    "probe_duration_seconds",
    "histogram",
    "time to answer a probe, inside the probe process (inside the launcher for a relayed one)",
    ("endpoint",),
)
BUILD_INFO = MetricSpec(
    "build_info",
    "gauge",
    "always 1: what this pod runs (engine_version: as installed, once preflight asked the engine)",
    ("version", "recipe", "pool", "role", "engine", "engine_version", "catalog_version"),
)
STARTUP_DEADLINE = MetricSpec(
    "startup_deadline_timestamp_seconds",
    "gauge",
    "Unix time the launcher ends a start-up still running (LLMD_STARTUP_SECONDS; absent when 0)",
)
# prometheus-client's ProcessCollector on the launcher's registry (Linux only): the launcher's own
# CPU, memory and file descriptors. Help texts are prometheus-client's, checked by the tests. Under
# PREFIX, not bare process_*: vLLM serves its own process_* on the same pod and container, so a bare
# name could not tell the launcher's series from the engine's (issue #34: the dashboard mixed them).
LAUNCHER_PROCESS = (
    MetricSpec("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes."),
    MetricSpec("process_resident_memory_bytes", "gauge", "Resident memory size in bytes."),
    MetricSpec(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
    ),
    MetricSpec("process_cpu_seconds", "counter", "Total user and system CPU time spent in seconds."),
    MetricSpec("process_open_fds", "gauge", "Number of open file descriptors."),
    MetricSpec("process_max_fds", "gauge", "Maximum number of open file descriptors."),
)

METRICS = (
    BUILD_INFO,
    PROCESS_UP,
    PROCESS_RESTARTS,
    PROCESS_LAST_EXIT_CODE,
    PROCESS_STATE,
    LIVE,
    READY,
    CHECK_UP,
    CHECK_DURATION,
    STARTUP_PHASE,
    STARTUP_DURATION,
    STARTUP_DEADLINE,
    WEIGHT_LOAD_PROGRESS,
    KV_EVENTS,
    *KV_EVENT_COUNTERS.values(),
    KV_EVENT_LAST_BATCH,
    KV_EVENT_SILENT,
    KV_EVENT_BLOCK_SIZE_MISMATCH,
    KV_EVENT_BLOCK_SIZE,
    KV_CACHE_IDENTITY,
    KV_EVENT_MALFORMED,
    FORWARD_LAST_PROGRESS,
    FORWARD_LAST_STEP,
    FORWARD_STALLED,
    ENGINE_KV_TRANSFER,
    FORWARD_CANARIES,
    PD_CANARIES,
    PEER_UP,
    PEER_LAST_ANSWER,
    PEER_LOST,
    PEER_PARKED,
    PARKED,
    STARTUP_HELD,
    STORE_MASTER_UP,
    STORE_MASTER_RESTARTS,
    CAPABILITY,
    LOG_LINES_DROPPED,
    WATCHER_ERRORS,
    PROBE_DURATION,
    *LAUNCHER_PROCESS,
)
"""Every metric the launcher serves, in the order of docs/reference/metrics.md."""


def wall_time(at: float, now: float) -> float:
    """A monotonic-clock instant as Unix time, for *_timestamp_seconds: `time() - x` in a query then
    gives its age, and the value does not go stale between scrapes as an age would."""
    return time.time() - (now - at)


class PodCollector(Collector):
    def __init__(self, health: PodHealth) -> None:
        self.health = health

    def collect(self) -> Iterator[Metric]:
        health = self.health
        if health.build is not None:
            build = BUILD_INFO.family()
            build.add_metric(health.build.labels(health.engine_version), 1.0)
            yield build
        yield from self._processes()
        live, _ = health.liveness()
        ready, _ = health.readiness()
        yield LIVE.value(live)
        yield READY.value(ready)
        checks, seconds = CHECK_UP.family(), CHECK_DURATION.family()
        for check in health.checks:
            checks.add_metric([check.name], float(health.passing(check)[0]))
            if (result := health.results.get(check.name)) is not None:
                seconds.add_metric([check.name], result.seconds)
        yield checks
        yield seconds
        phase = STARTUP_PHASE.family()
        current = health.phase
        for name in PHASES:
            phase.add_metric([name], float(name == current))
        yield phase
        yield STARTUP_DURATION.value(health.startup_seconds)
        startup = health.probes.startup_seconds
        if startup > 0:
            yield STARTUP_DEADLINE.value(wall_time(health.startup_due(), health.clock()))
        parked = PARKED.family()
        if health.parked is not None:
            for setting in health.parked.settings:
                parked.add_metric([setting, health.parked.heals], 1.0)
        yield parked
        yield STARTUP_HELD.value(health.held_seconds)
        ratio = health.progress.weight_ratio
        if ratio is not None:
            yield WEIGHT_LOAD_PROGRESS.value(ratio)
        errors = WATCHER_ERRORS.family()
        for watcher in health.watchers:
            errors.add_metric([watcher.name], float(health.watcher_errors[watcher.name]))
            yield from watcher.metrics()
        yield errors
        dropped = LOG_LINES_DROPPED.family()
        dropped.add_metric([], float(health.dropped_lines()))
        yield dropped

    def _processes(self) -> Iterator[Metric]:
        up, restarts, last = PROCESS_UP.family(), PROCESS_RESTARTS.family(), PROCESS_LAST_EXIT_CODE.family()
        lifecycle = PROCESS_STATE.family()
        for name in (p.name for p in self._plan_processes()):
            state = self.health.process(name)
            up.add_metric([name], float(state is not None and state.running))
            restarts.add_metric([name], float(state.restarts if state is not None else 0))
            if state is not None and state.last_exit is not None:
                last.add_metric([name], float(exit_code_of(state.last_exit)))
            if state is not None:
                for each in Lifecycle:
                    lifecycle.add_metric([name, each.value], float(state.lifecycle is each))
        yield up
        yield restarts
        yield last
        yield lifecycle

    def _plan_processes(self) -> list[ProcessSpec]:
        supervisor = self.health.supervisor
        return [s.spec for s in supervisor.processes] if supervisor is not None else []


def build_registry(health: PodHealth) -> tuple[CollectorRegistry, Histogram]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PodCollector(health))
    # the launcher's own process_* (a custom registry lacks them), as LAUNCHER_PROCESS declares them
    ProcessCollector(namespace=PREFIX.rstrip("_"), registry=registry)
    probes = Histogram(
        PROBE_DURATION.full_name,
        PROBE_DURATION.help,
        list(PROBE_DURATION.labels),
        buckets=PROBE_BUCKETS,
        registry=registry,
    )
    return registry, probes
