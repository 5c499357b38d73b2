"""/metrics: the launcher's view of the pod, read from PodHealth and the supervisor at scrape time
(so it can never disagree with the probes), plus the probe latency histogram."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from healthchecks.forward import ForwardWatcher
from healthchecks.kvevents import EVENT_TYPES, WatcherState
from healthchecks.progress import PHASES
from healthchecks.state import PodHealth
from launcher.contract.exits import exit_code_of
from launcher.contract.plan import ProcessSpec

PREFIX = "llmd_launcher_"
PROBE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class PodCollector(Collector):
    def __init__(self, health: PodHealth) -> None:
        self.health = health

    def collect(self) -> Iterator[Metric]:
        health = self.health
        yield from self._processes()
        live, _ = health.liveness()
        ready, _ = health.readiness()
        yield _gauge("live", "1 while no critical process has died", live)
        yield _gauge("ready", "1 while every readiness check passes and no stop has begun", ready)
        checks = GaugeMetricFamily(PREFIX + "check_up", "1 while the check passes", labels=["check"])
        seconds = GaugeMetricFamily(
            PREFIX + "check_duration_seconds", "how long the check's latest run took", labels=["check"]
        )
        for check in health.checks:
            checks.add_metric([check.name], float(health.passing(check)[0]))
            if (result := health.results.get(check.name)) is not None:
                seconds.add_metric([check.name], result.seconds)
        yield checks
        yield seconds
        phase = GaugeMetricFamily(PREFIX + "startup_phase", "1 for the pod's current phase", labels=["phase"])
        current = health.phase
        for name in PHASES:
            phase.add_metric([name], float(name == current))
        yield phase
        yield _gauge(
            "startup_duration_seconds",
            "seconds from launch until start-up ended (so far, while it has not)",
            health.startup_seconds,
        )
        ratio = health.progress.weight_ratio
        if ratio is not None:
            yield _gauge("weight_load_progress_ratio", "weight shards loaded over shards to load", ratio)
        if health.kv_events is not None:
            yield from _kv_events(health.kv_events.state)
        if health.forward is not None:
            yield from _forward(health.forward)
        dropped = CounterMetricFamily(
            PREFIX + "log_lines_dropped",
            "output lines dropped because the reader of the launcher's stdout/stderr fell behind",
        )
        dropped.add_metric([], float(health.dropped_lines()))
        yield dropped

    def _processes(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(PREFIX + "process_up", "1 while the process runs", labels=["process"])
        restarts = CounterMetricFamily(
            PREFIX + "process_restarts", "restarts of a sidecar by the launcher", labels=["process"]
        )
        last = GaugeMetricFamily(
            PREFIX + "process_last_exit_code",
            "exit code of the process's last exit (128+N: killed by signal N)",
            labels=["process"],
        )
        for name in (p.name for p in self._plan_processes()):
            state = self.health.process(name)
            up.add_metric([name], float(state is not None and state.running))
            restarts.add_metric([name], float(state.restarts if state is not None else 0))
            if state is not None and state.last_exit is not None:
                last.add_metric([name], float(exit_code_of(state.last_exit)))
        yield up
        yield restarts
        yield last

    def _plan_processes(self) -> list[ProcessSpec]:
        supervisor = self.health.supervisor
        return [s.spec for s in supervisor.processes] if supervisor is not None else []


def _kv_events(state: WatcherState) -> Iterator[Metric]:
    rank = ["rank"]
    events = CounterMetricFamily(PREFIX + "kv_events", "KV-cache events received", labels=["rank", "type"])
    counters = {
        name: CounterMetricFamily(PREFIX + f"kv_event_{name}", doc, labels=rank)
        for name, doc in (
            ("batches", "KV-event batches received (replayed ones included)"),
            ("gaps", "sequence gaps seen"),
            ("batches_missed", "batches found missing from the sequence"),
            ("batches_recovered", "missing batches the replay endpoint delivered"),
            ("batches_lost", "missing batches never delivered"),
            ("publisher_resets", "times the publisher's sequence restarted from 0"),
        )
    }
    since = GaugeMetricFamily(
        PREFIX + "kv_event_seconds_since_last_batch", "age of the latest batch", labels=rank
    )
    silent = GaugeMetricFamily(
        PREFIX + "kv_event_silent", "1 while no batch came although requests were served", labels=rank
    )
    mismatch = GaugeMetricFamily(
        PREFIX + "kv_event_block_size_mismatch",
        "1 while BlockStored events carry another block_size than the router's blockSizeTokens",
        labels=rank,
    )
    now = time.monotonic()
    for number, stats in state.ranks.items():
        label = [str(number)]
        for kind in EVENT_TYPES:
            events.add_metric([str(number), kind], stats.events[kind])
        for name, value in (
            ("batches", stats.batches), ("gaps", stats.gaps), ("batches_missed", stats.missed),
            ("batches_recovered", stats.recovered), ("batches_lost", stats.lost),
            ("publisher_resets", stats.resets),
        ):  # fmt: skip
            counters[name].add_metric(label, value)
        if stats.last_batch_at is not None:
            since.add_metric(label, now - stats.last_batch_at)
        silent.add_metric(label, float(stats.silent))
        mismatch.add_metric(label, float(stats.block_size_mismatch))
    malformed = CounterMetricFamily(
        PREFIX + "kv_event_malformed", "messages that could not be decoded, by kind", labels=["kind"]
    )
    for kind, count in state.malformed.items():
        malformed.add_metric([kind], count)
    yield from (events, *counters.values(), since, silent, mismatch, malformed)


def _forward(watcher: ForwardWatcher) -> Iterator[Metric]:
    source = ["source"]
    since = GaugeMetricFamily(
        PREFIX + "forward_seconds_since_progress",
        "seconds since the engine's token counters moved or a canary came back",
        labels=source,
    )
    stalled = GaugeMetricFamily(
        PREFIX + "forward_stalled", "1 once the engine is judged stalled", labels=source
    )
    canaries = CounterMetricFamily(
        PREFIX + "forward_canaries",
        "one-token canary requests sent, by outcome",
        labels=["source", "outcome"],
    )
    now = watcher.clock()
    for state in watcher.states:
        name = [state.source.name]
        if state.progress_at is not None:
            since.add_metric(name, now - state.progress_at)
        stalled.add_metric(name, float(watcher.stalled_source == state.source.name))
        for outcome in ("ok", "failed"):
            canaries.add_metric([state.source.name, outcome], state.canaries[outcome])
    yield from (since, stalled, canaries)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, value=float(value))


def build_registry(health: PodHealth) -> tuple[CollectorRegistry, Histogram]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PodCollector(health))
    probes = Histogram(
        PREFIX + "probe_duration_seconds",
        "time to answer a probe, inside the launcher",
        ["endpoint"],
        buckets=PROBE_BUCKETS,
        registry=registry,
    )
    return registry, probes
