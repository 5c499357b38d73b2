"""Each watcher's task, killed (issue #40 item 3): an exception inside a watcher is counted
(llmd_launcher_watcher_errors_total) and told in one line, and the watcher runs again a retry later;
its task cancelled from outside ends the pod with exit 1 naming it (a pod whose watch is blind must not
pass for a watched one). Every watcher the factory builds for a P/D decode pod and a prefill leader,
through `watching`, the one place run.py starts them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import generate_latest

from healthchecks.metrics import build_registry
from healthchecks.pod_watchers import build_watchers
from healthchecks.state import PodHealth
from healthchecks.watcher import Watcher, watching
from launcher.config.settings import Settings
from launcher.contract.exits import INTERNAL_ERROR
from launcher.contract.stop import Verdict
from roles import build_plan
from tests.unit.healthchecks.test_canary import Recorder
from tests.unit.healthchecks.test_probe_rules import ROLES
from tests.unit.healthchecks.test_watchers import KIMI, _prefill_leader


def _every_watcher() -> list[tuple[PodHealth, Watcher]]:
    pods = []
    for settings in (_prefill_leader(), Settings(**_decode_env())):
        plan = build_plan(settings, KIMI)
        health = PodHealth(plan.probes)
        health.watchers = build_watchers(plan, health, settings, Recorder(), parks=False)
        pods += [(health, w) for w in health.watchers]
    return pods


def _decode_env() -> dict[str, Any]:
    """The decode pod of test_probe_rules, as Settings fields, with the P/D canary."""
    env = ROLES["decode"][0]
    return {
        "pool": env["LLMD_POOL"], "pod_ip": env["POD_IP"], "leader_address": env.get("LWS_LEADER_ADDRESS"),
        "group_size": env.get("LWS_GROUP_SIZE"), "worker_index": env.get("LWS_WORKER_INDEX"),
        "pd_canary_prefiller": "10.64.2.2:8000",
    }  # fmt: skip


WATCHERS = _every_watcher()
NAMES = [w.name for _, w in WATCHERS]


def test_both_pods_cover_every_kind_of_watcher() -> None:
    assert {
        "checks",
        "kv-events",
        "startup-deadline",
        "forward",
        "pd_canary",
        "peers",
        "store_master",
    } <= set(NAMES)


async def _forever() -> Verdict | None:
    await asyncio.Event().wait()
    return None


@pytest.mark.parametrize(("health", "watcher"), WATCHERS, ids=NAMES)
def test_an_exception_inside_a_watcher_is_counted_told_and_watched_again(
    health: PodHealth, watcher: Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[int] = []

    async def broken() -> Verdict | None:
        runs.append(1)
        if len(runs) == 1:
            raise ValueError("Newline or carriage return character detected in HTTP status message or header")
        return await _forever()

    monkeypatch.setattr(watcher, "run", broken)
    log, verdicts = Recorder(), list[Verdict]()

    async def scenario() -> None:
        async with watching((watcher,), verdicts.append, log, health.watcher_errors, 0.01):
            for _ in range(200):
                if len(runs) == 2:
                    break
                await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert len(runs) == 2 and verdicts == []  # watched again, nothing ended
    assert [(level, event) for level, event, _ in log.lines] == [
        ("error", f"watcher {watcher.name} failed; watching again in 0.01 s")
    ]
    assert log.lines[0][2]["error"].startswith("ValueError: Newline or carriage return")
    metrics = generate_latest(build_registry(health)[0]).decode()
    assert f'llmd_launcher_watcher_errors_total{{watcher="{watcher.name}"}} 1.0' in metrics


@pytest.mark.parametrize(("health", "watcher"), WATCHERS, ids=NAMES)
def test_a_watcher_task_cancelled_from_outside_ends_the_pod_naming_it(
    health: PodHealth, watcher: Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watcher, "run", _forever)
    verdicts: list[Verdict] = []

    async def scenario() -> None:
        async with watching((watcher,), verdicts.append, Recorder(), health.watcher_errors, 0.01):
            await asyncio.sleep(0.01)
            (task,) = [t for t in asyncio.all_tasks() if t.get_name() == f"watcher {watcher.name}"]
            task.cancel()
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert verdicts == [
        Verdict(
            INTERNAL_ERROR.says(error=f"watcher {watcher.name} stopped (cancelled); the pod is unwatched"),
            INTERNAL_ERROR.number,
        )
    ]


def test_leaving_cancels_every_watcher_and_ends_nothing() -> None:
    health, watcher = WATCHERS[0]
    verdicts: list[Verdict] = []

    async def scenario() -> None:
        async with watching((watcher,), verdicts.append, Recorder(), health.watcher_errors, 0.01):
            await asyncio.sleep(0.05)

    asyncio.run(scenario())
    assert verdicts == []
