"""A start-up deadline that falls while the checkpoint is still being copied parks the pod (in an LWS
group) instead of ending it: healthchecks/hydration.py and the deadline watcher, on a real directory
that keeps growing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from healthchecks.deadline import StartupDeadline
from healthchecks.hydration import Hydration, changed_file, snapshot
from healthchecks.state import PodHealth
from launcher.contract.phases import LOADING_WEIGHTS, PARKED
from launcher.contract.plan import Check, Probes

DEADLINE = 0.3


def _health() -> PodHealth:
    return PodHealth(Probes(8090, ready=(), started=Check("e", "e"), startup_seconds=DEADLINE))


def test_a_snapshot_sees_a_file_appear_or_grow_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    first = snapshot(str(tmp_path))
    assert changed_file(first, snapshot(str(tmp_path))) is None
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "model-00002.safetensors").write_bytes(b"x")
    grown = snapshot(str(tmp_path))
    assert changed_file(first, grown) == "sub/model-00002.safetensors"
    with open(tmp_path / "sub" / "model-00002.safetensors", "ab") as shard:
        shard.write(b"more")
    assert changed_file(grown, snapshot(str(tmp_path))) == "sub/model-00002.safetensors"


def test_a_checkpoint_copied_before_the_pod_started_is_not_being_copied(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"x" * 10)  # written a moment ago, then left alone
    hydration = Hydration(str(tmp_path), bound=60, quiet_seconds=1, scan_every=0)
    assert hydration.copying(0.0) is None  # the first look is the baseline
    assert hydration.copying(0.5) is None


async def _grow(path: Path, seconds: float) -> None:
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds
    while loop.time() < until:
        with open(path, "ab") as shard:
            shard.write(b"x" * 64)
        await asyncio.sleep(0.02)


def test_the_deadline_parks_the_pod_while_the_checkpoint_grows_and_counts_again_after(
    tmp_path: Path,
) -> None:
    shard = tmp_path / "model-00001-of-00002.safetensors"
    shard.write_bytes(b"")

    async def scenario() -> tuple[list[tuple[str, str]], float, bool]:
        health = _health()
        hydration = Hydration(str(tmp_path), bound=60, quiet_seconds=0.3, scan_every=0.05)
        watcher = asyncio.create_task(StartupDeadline(health, DEADLINE, tick=0.05, hydration=hydration).run())
        health.on_line("e", "irrelevant")  # the engine runs meanwhile
        health.set_phase(LOADING_WEIGHTS)
        seen: list[tuple[str, str]] = []
        copy = asyncio.create_task(_grow(shard, 1.0))  # 3x the deadline
        while not copy.done():
            live, body = health.liveness()
            assert live and not watcher.done(), body  # alive, not ended: parked for the copy
            if health.parked is not None:
                seen.append((body["phase"], health.parked.reason))
            await asyncio.sleep(0.05)
        ended = health.clock()
        verdict = await asyncio.wait_for(watcher, timeout=3)
        assert verdict is not None and verdict.exit_code == 6
        return seen, health.clock() - ended, health.parked is None and health.phase == LOADING_WEIGHTS

    seen, after, unparked = asyncio.run(scenario())
    assert seen, "never parked while the checkpoint grew"
    assert all(phase == PARKED for phase, _ in seen)
    assert "model.path: the checkpoint is still being copied (model-00001-of-00002" in seen[-1][1]
    # The copy ended: quiet for 0.3 s, then what was left of the deadline before it parked counts.
    assert 0.25 <= after < 1.0
    assert unparked


def test_without_hydration_watching_the_deadline_ends_a_pod_whose_checkpoint_grows(tmp_path: Path) -> None:
    """Outside an LWS group (the factory gives no Hydration): exit 6 on time, as before."""
    shard = tmp_path / "model.safetensors"

    async def scenario() -> float:
        health = _health()
        copy = asyncio.create_task(_grow(shard, 1.0))
        began = health.clock()
        verdict = await asyncio.wait_for(StartupDeadline(health, DEADLINE, tick=0.05).run(), timeout=3)
        copy.cancel()
        assert verdict is not None and verdict.exit_code == 6
        return health.clock() - began

    assert asyncio.run(scenario()) < 0.6


def test_parking_for_a_copy_is_bounded_by_llmd_park_seconds(tmp_path: Path) -> None:
    shard = tmp_path / "model.safetensors"
    shard.write_bytes(b"")

    async def scenario() -> float:
        health = _health()
        hydration = Hydration(str(tmp_path), bound=0.4, quiet_seconds=10, scan_every=0.05)
        copy = asyncio.create_task(_grow(shard, 5.0))  # a copy that outlasts the bound
        began = health.clock()
        verdict = await asyncio.wait_for(
            StartupDeadline(health, DEADLINE, tick=0.05, hydration=hydration).run(), timeout=4
        )
        copy.cancel()
        assert verdict is not None and verdict.exit_code == 6
        assert health.held_seconds >= 0.35  # the bound's time was parked, then the deadline ran
        return health.clock() - began

    took = asyncio.run(scenario())
    assert 0.4 + DEADLINE - 0.1 <= took < 1.5
