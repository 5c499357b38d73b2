"""A parked pod as the kubelet, Prometheus and its peers see it (launcher/parking.py), and the start-up
deadline on hold while this pod or a peer is parked."""

from __future__ import annotations

import asyncio

from prometheus_client import generate_latest

from healthchecks.deadline import StartupDeadline
from healthchecks.metrics import build_registry
from healthchecks.state import Parked, PodHealth
from launcher.contract.plan import Check, Probes

REASON = "LLMD_RECIPE_FILE: /r.yaml: pools.p.nodez is not a recipe key; did you mean nodes?"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _health(startup_seconds: float = 0.0) -> tuple[PodHealth, Clock]:
    clock = Clock()
    probes = Probes(8090, ready=(), started=Check("engine", "engine"), startup_seconds=startup_seconds)
    return PodHealth(probes, clock=clock), clock


def _parked(health: PodHealth, clock: Clock) -> None:
    health.park(Parked(REASON, ("LLMD_RECIPE_FILE",), "in place", clock.now))


def test_parked_is_live_but_neither_started_nor_ready_and_says_why() -> None:
    health, clock = _health()
    _parked(health, clock)
    assert health.liveness() == (True, {"live": True, "phase": "parked", "parked": REASON})
    ready, body = health.readiness()
    assert not ready and body["failing"] == {"parked": REASON}
    started, body = health.startup()
    assert not started and body["failing"] == {"parked": REASON} and body["phase"] == "parked"


def test_the_metric_says_parked_and_why() -> None:
    health, clock = _health()
    registry, _ = build_registry(health)
    assert 'llmd_launcher_parked{heals="in place",setting="LLMD_RECIPE_FILE"} 1.0' not in (
        generate_latest(registry).decode()
    )
    _parked(health, clock)
    text = generate_latest(registry).decode()
    assert 'llmd_launcher_parked{heals="in place",setting="LLMD_RECIPE_FILE"} 1.0' in text
    assert 'llmd_launcher_startup_phase{phase="parked"} 1.0' in text


def test_time_parked_does_not_count_against_the_start_up_deadline() -> None:
    health, clock = _health(startup_seconds=60)
    _parked(health, clock)
    clock.now += 500
    health.unpark()
    assert health.startup_due() == 100 + 60 + 500
    health.hold_limit = 120  # LLMD_PARK_SECONDS: the kubelet's startup probe is sized for no more
    assert health.startup_due() == 100 + 60 + 120


class HoldingWatcher:
    name = "peers"

    def __init__(self) -> None:
        self.why: str | None = "group member leader is parked: …"

    def holds_startup(self) -> str | None:
        return self.why


def test_a_parked_peer_holds_the_start_up_deadline_until_it_unparks() -> None:
    async def scenario() -> tuple[bool, float]:
        health = PodHealth(Probes(8090, ready=(), started=Check("e", "e"), startup_seconds=0.3))
        peer = HoldingWatcher()
        health.watchers = (peer,)  # type: ignore[assignment]  # only holds_startup is asked
        task = asyncio.create_task(StartupDeadline(health, 0.3, tick=0.05).run())
        await asyncio.sleep(0.8)  # well past the 0.3 s deadline, all of it on hold
        held_through = not task.done()
        peer.why = None
        began = health.clock()
        verdict = await asyncio.wait_for(task, timeout=2)
        assert verdict is not None
        return held_through, health.clock() - began

    held_through, after = asyncio.run(scenario())
    assert held_through
    assert after < 0.5  # the deadline runs again once the peer is no longer parked


def test_every_change_a_probe_would_show_is_announced_so_the_probe_process_gets_it_at_once() -> None:
    """PodHealth.changed feeds ProbeServer.publish_now: the probe process looks by itself only every
    PUBLISH_INTERVAL (0.25 s), so a park, a new phase or a check that flips must be pushed."""
    from healthchecks.state import CheckResult

    health, clock = _health()
    said: list[str] = []
    health.changed = lambda: said.append(health.phase)
    _parked(health, clock)
    _parked(health, clock)  # parked again (a new reason): announced too
    health.unpark()
    engine = health.probes.started
    health.record(engine, CheckResult(False, "refused", clock.now, 0.0))
    health.record(engine, CheckResult(False, "refused", clock.now, 0.0))  # no change: not announced
    health.record(engine, CheckResult(True, "200", clock.now, 0.0))
    assert said == ["parked", "parked", "preflight", "preflight", "started"]
