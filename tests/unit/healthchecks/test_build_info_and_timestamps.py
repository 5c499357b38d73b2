"""What a platform team reads on day 2: llmd_launcher_build_info (engine and catalogue version drift),
the launcher's own process_* metrics, and Unix timestamps where an age would go stale between
scrapes (peers, forward progress, KV-event batches, the start-up deadline)."""

from __future__ import annotations

import time

import structlog
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from healthchecks.forward import ForwardWatcher
from healthchecks.kvevents.watcher import KvEventWatcher
from healthchecks.metrics import build_registry
from healthchecks.peers import PeerWatcher
from healthchecks.state import BuildInfo, PodHealth
from launcher.contract.plan import (
    Check,
    KvEventSource,
    KvEventsWatch,
    Peer,
    Probes,
    ProgressSource,
    ProgressWatch,
)
from tests.unit.healthchecks.loopback import completion_canary

AGE = 30.0  # seconds since each watched thing last happened, on the monotonic clock


def samples(health: PodHealth) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry, _ = build_registry(health)
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_build_info_names_what_runs_and_the_engine_as_installed() -> None:
    health = PodHealth(Probes(9100, ready=(), started=Check("engine", "engine")))
    health.build = BuildInfo("0.1.0", "kimi-k3.1-pro", "prefill", "prefill-leader", "vllm", "0.32.0")
    labels = {"version": "0.1.0", "recipe": "kimi-k3.1-pro", "pool": "prefill", "role": "prefill-leader",
              "engine": "vllm", "catalog_version": "0.32.0"}  # fmt: skip
    before = {k: v for k, v in samples(health).items() if k[0] == "llmd_launcher_build_info"}
    assert before == {
        ("llmd_launcher_build_info", tuple(sorted((labels | {"engine_version": ""}).items()))): 1.0
    }
    health.flag_catalog = {"installed_version": "0.33.1+cpu", "catalog_version": "0.32.0"}  # preflight's
    after = {k: v for k, v in samples(health).items() if k[0] == "llmd_launcher_build_info"}
    assert after == {
        ("llmd_launcher_build_info", tuple(sorted((labels | {"engine_version": "0.33.1+cpu"}).items()))): 1.0
    }


def test_the_launchers_own_process_metrics_are_served() -> None:
    found = samples(PodHealth(Probes(9100, ready=(), started=Check("engine", "engine"))))
    started = found[("llmd_launcher_process_start_time_seconds", ())]
    assert time.time() - 3600 * 24 < started <= time.time()
    assert found[("llmd_launcher_process_resident_memory_bytes", ())] > 1 << 20
    assert found[("llmd_launcher_process_open_fds", ())] >= 3


def test_last_times_are_unix_timestamps_not_ages() -> None:
    log = structlog.get_logger()
    probes = Probes(9100, ready=(), started=Check("e", "e"), peers=(Peer("leader", "10.0.0.1", 9100),),
                    startup_seconds=600.0)  # fmt: skip
    health = PodHealth(probes)
    peers = PeerWatcher(probes, 1.0, 1.0, log)
    forward = ForwardWatcher(
        ProgressWatch((ProgressSource("engine", 8000),), ("tokens",), completion_canary("m"), 60.0, 10.0),
        lambda: True,
        1.0,
        1.0,
        log,
    )
    kv = KvEventWatcher(KvEventsWatch((KvEventSource(0, 5557, None, 8000),), 60.0), log)
    then = time.monotonic() - AGE
    peers.states[0].answered_at = then
    forward.states[0].progress_at = then
    kv.state.ranks[0].last_batch_at = then
    health.watchers = (peers, forward, kv)
    now = time.time()
    found = samples(health)
    for key in (
        ("llmd_launcher_peer_last_answer_timestamp_seconds", (("peer", "leader"),)),
        ("llmd_launcher_forward_last_progress_timestamp_seconds", (("source", "engine"),)),
        ("llmd_launcher_kv_event_last_batch_timestamp_seconds", (("rank", "0"),)),
    ):
        assert abs(found[key] - (now - AGE)) < 2.0, key
    deadline = found[("llmd_launcher_startup_deadline_timestamp_seconds", ())]
    assert abs(deadline - (now + 600.0 - (time.monotonic() - health.launched_at))) < 2.0


def test_no_deadline_no_deadline_metric() -> None:
    found = samples(PodHealth(Probes(9100, ready=(), started=Check("e", "e"), startup_seconds=0.0)))
    assert not [k for k in found if k[0] == "llmd_launcher_startup_deadline_timestamp_seconds"]
