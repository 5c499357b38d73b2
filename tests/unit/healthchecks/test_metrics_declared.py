"""Every metric the launcher serves is declared once in healthchecks/metrics.py (METRICS), from which
docs/reference/metrics.md is generated: a family the collector yields without a declaration, or with
another type or help than declared, fails here."""

from __future__ import annotations

import pytest
import structlog
from prometheus_client import generate_latest

from healthchecks.capabilities import CapabilityWatcher
from healthchecks.forward import ForwardWatcher
from healthchecks.kv_transfer import KvTransferRelay
from healthchecks.kvevents.watcher import KvEventWatcher
from healthchecks.metrics import METRICS, build_registry
from healthchecks.pd_canary import PdCanaryWatcher
from healthchecks.peers import PeerWatcher
from healthchecks.state import BuildInfo, PodHealth
from healthchecks.store_master import StoreMasterWatcher
from launcher.contract.capabilities import CapabilityCheck, CapabilityWatch, Level, TcpOpen
from launcher.contract.plan import (
    Check,
    KvEventSource,
    KvEventsWatch,
    PdCanary,
    Peer,
    Probes,
    ProgressSource,
    ProgressWatch,
    StoreMaster,
)
from tests.unit.healthchecks.loopback import completion_canary


@pytest.fixture
def health(monkeypatch: pytest.MonkeyPatch) -> PodHealth:
    """A pod with every optional family present: KV events, forward progress and its KV-transfer relay,
    the P/D canary, peers, weight loading, build info, a start-up deadline, a store master."""
    probes = Probes(
        port=9100, ready=(Check("engine", "engine"),), started=Check("engine", "engine"), startup_seconds=60.0
    )
    health = PodHealth(probes)
    health.build = BuildInfo("0.1.0", "r", "decode", "decode", "vllm", "0.32.0")
    log = structlog.get_logger()
    watch = ProgressWatch((ProgressSource("engine", 8000),), ("tokens",), completion_canary("m"), 60.0, 10.0)
    with_peers = Probes(9100, ready=(), started=Check("e", "e"), peers=(Peer("leader", "10.0.0.1", 9100),))
    master = StoreMaster("mooncake master", "m:8700", "http://m:8080/metadata", "s", "fix", reregister=True)
    health.watchers = (
        KvEventWatcher(KvEventsWatch((KvEventSource(0, 5557, None, 8000),), 60.0), log),
        ForwardWatcher(watch, lambda: True, 1.0, 1.0, log, readers=[KvTransferRelay(("t",), "d", "d")]),
        PdCanaryWatcher(PdCanary("p:8000", 8000, tls=False), watch, lambda: True, 1.0, log),
        PeerWatcher(with_peers, 1.0, 1.0, log),
        StoreMasterWatcher(master, "marker", 1.0, 1.0, log),
        CapabilityWatcher(
            CapabilityWatch(
                (CapabilityCheck("metric.queue-depth", Level.REQUIRED, TcpOpen("h", 1), "t", "b"),),
                60,
                "vllm",
            ),
            health,
            1.0,
            log,
        ),
    )
    monkeypatch.setattr(type(health.progress), "weight_ratio", property(lambda _: 0.5))
    return health


def test_every_served_family_is_declared_with_its_type_and_help(health: PodHealth) -> None:
    registry, probe_latency = build_registry(health)
    probe_latency.labels("livez").observe(0.001)
    declared = {m.full_name: (m.kind, m.help) for m in METRICS}
    served = {f.name: (f.type, f.documentation) for f in registry.collect()}
    assert served == {name: declared[name] for name in served}, "a family is served that METRICS lacks"
    assert set(served) == set(declared), "METRICS declares a family nothing serves"


def test_exposed_names_are_the_documented_ones(health: PodHealth) -> None:
    registry, _ = build_registry(health)
    text = generate_latest(registry).decode()
    for metric in METRICS:
        if metric.kind != "histogram":
            assert f"# TYPE {metric.exposed} {metric.kind}" in text
            assert metric.labels or f"\n{metric.exposed} " in text
