"""PeerWatcher against real HTTP servers on loopback (in this process): a peer that answered once and
then stops is lost after `peer_lost_seconds`; one that never answered, or comes back in time, is not."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from aiohttp import web

from healthchecks.peers import PeerWatcher
from launcher.contract.plan import Check, Peer, Probes
from tests.ports import free_port
from tests.unit.healthchecks.loopback import QuietLog


async def _serve(port: int, status: list[int]) -> web.AppRunner:
    async def livez(_request: web.Request) -> web.Response:
        return web.Response(status=status[0])

    app = web.Application()
    app.router.add_get("/livez", livez)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def _watcher(port: int, lost: list[str], lost_after: float = 0.3) -> Coroutine[Any, Any, None]:
    """The watcher's run, its verdict's reason appended to `lost`."""
    probes = Probes(
        8090, ready=(), started=Check("e", "e"), peers=(Peer("worker 1", "127.0.0.1", port),),
        peer_lost_seconds=lost_after,
    )  # fmt: skip
    watcher = PeerWatcher(probes, interval=0.05, timeout=0.5, log=QuietLog())

    async def run() -> None:
        lost.append((await watcher.run()).reason)

    return run()


def test_a_peer_that_answered_and_went_away_is_lost() -> None:
    async def scenario() -> tuple[list[str], float]:
        port, lost = free_port(), list[str]()
        runner = await _serve(port, [200])
        task = asyncio.create_task(_watcher(port, lost))
        await asyncio.sleep(0.3)
        assert not lost and not task.done()
        await runner.cleanup()  # the peer's launcher exits: connection refused from now on
        gone = asyncio.get_running_loop().time()
        await asyncio.wait_for(task, timeout=5)
        return lost, asyncio.get_running_loop().time() - gone

    lost, after = asyncio.run(scenario())
    assert len(lost) == 1 and "worker 1 (127.0.0.1) is gone" in lost[0] and "refused" in lost[0]
    assert 0.3 <= after < 2


def test_a_peer_answering_503_is_lost_too() -> None:
    async def scenario() -> list[str]:
        port, lost, status = free_port(), list[str](), [200]
        runner = await _serve(port, status)
        task = asyncio.create_task(_watcher(port, lost))
        await asyncio.sleep(0.2)
        status[0] = 503  # its engine died; the launcher is stopping the pod
        await asyncio.wait_for(task, timeout=5)
        await runner.cleanup()
        return lost

    assert "/livez 503" in asyncio.run(scenario())[0]


def test_a_peer_never_seen_or_back_in_time_is_not_lost() -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        never_port, never_lost = free_port(), list[str]()
        never = asyncio.create_task(_watcher(never_port, never_lost))  # still starting
        port, lost, status = free_port(), list[str](), [200]
        runner = await _serve(port, status)
        blip = asyncio.create_task(_watcher(port, lost, lost_after=0.5))
        await asyncio.sleep(0.2)
        status[0] = 503
        await asyncio.sleep(0.2)  # shorter than lost_after
        status[0] = 200
        await asyncio.sleep(0.8)
        for task in (never, blip):
            assert not task.done()
            task.cancel()
        await runner.cleanup()
        return never_lost, lost

    assert asyncio.run(scenario()) == ([], [])
