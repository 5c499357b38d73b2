"""The watcher protocol end to end, without processes: the factory builds the watchers the plan asks
for; PodHealth's /livez and /readyz and /metrics come from iterating over them, the peer watcher like
the others; each process's life-cycle state is on /metrics."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import generate_latest

from healthchecks.deadline import StartupDeadline
from healthchecks.metrics import build_registry
from healthchecks.peers import PeerWatcher
from healthchecks.pod_watchers import build_watchers
from healthchecks.state import PodHealth
from launcher.config.recipe_file import RecipeSource, load_recipe
from launcher.config.settings import Settings
from launcher.contract.exits import GROUP_BROKEN
from launcher.contract.lifecycle import Lifecycle
from launcher.contract.plan import Check, EventsFlowing, Peer, Probes, ProcessSpec
from roles import build_plan
from tests.ports import free_port
from tests.unit.healthchecks.loopback import QuietLog
from tests.unit.healthchecks.test_peers import _serve
from tests.unit.healthchecks.test_probe_rules import FakeProcess, FakeSupervisor
from tests.unit.roles.test_golden_kimi import PREFILL_LEADER

KIMI = load_recipe(RecipeSource("kimi-k3.1-pro", None))


def _prefill_leader(**settings: Any) -> Settings:
    return Settings(
        leader_address=PREFILL_LEADER,
        group_size=2,
        worker_index=0,
        pod_ip="10.64.1.10",
        pool="prefill",
        **settings,
    )


def _scrape(health: PodHealth) -> str:
    registry, _ = build_registry(health)
    return generate_latest(registry).decode()


# ------------------------------------------------------------------ the factory
def test_the_factory_builds_every_watcher_the_plan_asks_for() -> None:
    plan = build_plan(_prefill_leader(), KIMI)
    assert plan.probes is not None
    watchers = build_watchers(plan, PodHealth(plan.probes), _prefill_leader(), QuietLog(), parks=False)
    assert [w.name for w in watchers] == [
        "checks", "capabilities", "kv-events", "startup-deadline", "forward", "peers",
        "store_master"
    ]  # fmt: skip


@pytest.mark.parametrize("parks", [True, False], ids=["lws-group-parks", "exits"])
def test_the_deadline_watches_the_checkpoint_copy_only_in_a_pod_that_parks(
    parks: bool, tmp_path: Any
) -> None:
    plan = replace(build_plan(_prefill_leader(), KIMI), model_path=str(tmp_path))
    assert plan.probes is not None
    settings = _prefill_leader(park_seconds=120)
    watchers = build_watchers(plan, PodHealth(plan.probes), settings, QuietLog(), parks=parks)
    deadline = next(w for w in watchers if isinstance(w, StartupDeadline))
    watched = deadline.hydration
    if parks:  # in an LWS group: the model directory, parked at most LLMD_PARK_SECONDS
        assert watched is not None and (watched.root, watched.bound) == (str(tmp_path), 120)
    else:  # outside: the deadline ends the pod on time, copy or not
        assert watched is None


def test_the_factory_builds_only_the_check_runner_when_every_watch_is_off() -> None:
    settings = _prefill_leader(stall_seconds=0, peer_lost_seconds=0, startup_seconds=0)
    plan = build_plan(settings, KIMI)
    assert plan.probes is not None and plan.kv_events is not None
    plan = replace(plan, kv_events=None, needs=replace(plan.needs, store_master=None), capabilities=None)
    watchers = build_watchers(plan, PodHealth(plan.probes), settings, QuietLog(), parks=False)
    assert [w.name for w in watchers] == ["checks"]


def test_the_factory_passes_the_settings_values_on() -> None:
    settings = _prefill_leader(check_interval=0.7, check_timeout=0.3, peer_lost_seconds=12)
    plan = build_plan(settings, KIMI)
    assert plan.probes is not None
    peers = next(
        w
        for w in build_watchers(plan, PodHealth(plan.probes), settings, QuietLog(), parks=False)
        if w.name == "peers"
    )
    assert isinstance(peers, PeerWatcher)
    assert (peers.interval, peers.timeout, peers.lost_after) == (0.7, 0.3, 12)


# ------------------------------------------------------------------ the peer watcher, like the others
def _lost_peer_watcher() -> PeerWatcher:
    """A peer that answered, then went away for good: the watcher's verdict is in."""

    async def scenario() -> PeerWatcher:
        port = free_port()
        probes = Probes(
            8090, ready=(), started=Check("e", "e"), peers=(Peer("worker 1", "127.0.0.1", port),),
            peer_lost_seconds=0.2,
        )  # fmt: skip
        watcher = PeerWatcher(probes, interval=0.05, timeout=0.5, log=QuietLog())
        runner = await _serve(port, [200])
        task = asyncio.create_task(watcher.run())
        await asyncio.sleep(1.0)  # answered at least once, even on a loaded machine (0.2 s was not)
        await runner.cleanup()
        verdict = await asyncio.wait_for(task, timeout=15)
        assert verdict.exit_code == GROUP_BROKEN.number
        return watcher

    return asyncio.run(scenario())


def _running_engine() -> FakeProcess:
    return FakeProcess(ProcessSpec("engine", ("vllm",)), 100, True, lifecycle=Lifecycle.RUNNING)


def _health(*watchers: PeerWatcher) -> PodHealth:
    health = PodHealth(Probes(8090, ready=(), started=Check("engine", "engine")))
    health.attach(
        FakeSupervisor(
            [FakeProcess(ProcessSpec("engine", ("vllm",)), 100, True, lifecycle=Lifecycle.RUNNING)]
        )
    )
    health.watchers = watchers
    return health


def test_a_lost_peer_fails_livez_at_once_naming_it() -> None:
    """Before the supervisor acts on the verdict (its stop state is still Running)."""
    live, body = _health(_lost_peer_watcher()).liveness()
    assert not live
    assert body["reason"].startswith("group member worker 1 (127.0.0.1) is gone")
    assert body["peers"]["worker 1"]["up"] is False and "refused" in body["peers"]["worker 1"]["detail"]


def test_peers_are_on_metrics_answering_and_lost() -> None:
    watcher = PeerWatcher(
        Probes(8090, ready=(), started=Check("e", "e"), peers=(Peer("leader", "10.0.0.1", 8090),)),
        interval=1, timeout=1, log=QuietLog(),
    )  # fmt: skip
    watcher.states[0].answered_at = watcher.clock()
    text = _scrape(_health(watcher))
    assert 'llmd_launcher_peer_up{peer="leader"} 1.0' in text
    assert 'llmd_launcher_peer_lost{peer="leader"} 0.0' in text
    assert 'llmd_launcher_peer_last_answer_timestamp_seconds{peer="leader"}' in text
    text = _scrape(_health(_lost_peer_watcher()))
    assert 'llmd_launcher_peer_up{peer="worker 1"} 0.0' in text
    assert 'llmd_launcher_peer_lost{peer="worker 1"} 1.0' in text
    assert "llmd_launcher_live 0.0" in text


# ------------------------------------------------------------------ readiness answered by a watcher
def test_a_check_no_http_answers_is_asked_of_the_watchers() -> None:
    check = Check("kv-events", "engine", EventsFlowing())

    class Flowing:
        name = "kv-events"

        def answer(self, asked: Check) -> tuple[bool, str] | None:
            return (False, "no KV events from rank(s) [0]") if asked == check else None

    health = _health()
    assert health.passing(check) == (False, "no watcher answers kv-events")
    health.watchers = (Flowing(),)  # type: ignore[assignment]
    assert health.passing(check) == (False, "no KV events from rank(s) [0]")


# ------------------------------------------------------------------ life-cycle state per process
@pytest.mark.parametrize("state", list(Lifecycle))
def test_each_process_shows_its_life_cycle_state_on_metrics(state: Lifecycle) -> None:
    health = PodHealth(Probes(8090, ready=(), started=Check("engine", "engine")))
    render = ProcessSpec("render", ("render",), critical=False)
    health.attach(FakeSupervisor([_running_engine(), FakeProcess(render, 100, True, lifecycle=state)]))
    text = _scrape(health)
    for each in Lifecycle:
        expected = 1.0 if each is state else 0.0
        assert f'llmd_launcher_process_state{{process="render",state="{each.value}"}} {expected}' in text
    assert 'llmd_launcher_process_state{process="engine",state="running"} 1.0' in text
