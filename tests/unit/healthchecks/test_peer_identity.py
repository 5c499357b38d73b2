"""What counts as a peer launcher's answer (issue #24 items 4 and 7, issue #20 part B): a redirect
does not, an answer from another launcher than the one seen before is a loss at once, and a parked
peer is alive and holds this pod's start-up deadline. Real HTTP servers on loopback."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from healthchecks.http import IDENTITY_HEADER
from healthchecks.peers import PeerWatcher
from launcher.contract.exits import GROUP_BROKEN
from launcher.contract.plan import Check, Peer, Probes
from launcher.contract.stop import Verdict
from tests.ports import free_port
from tests.unit.healthchecks.loopback import QuietLog


class FakePeer:
    """A peer's probe server whose /livez answer the test changes; /elsewhere always answers 200."""

    def __init__(self) -> None:
        self.port = free_port()
        self.status, self.identity, self.body = 200, "pod-1@t0", {"live": True, "phase": "started"}
        self.runner: web.AppRunner | None = None

    async def start(self) -> FakePeer:
        async def livez(_: web.Request) -> web.Response:
            headers = {IDENTITY_HEADER: self.identity} if self.identity else {}
            if 300 <= self.status < 400:
                headers["Location"] = f"http://127.0.0.1:{self.port}/elsewhere"
            return web.Response(status=self.status, text=json.dumps(self.body), headers=headers)

        async def elsewhere(_: web.Request) -> web.Response:
            return web.Response(status=200, text="{}")

        app = web.Application()
        app.router.add_get("/livez", livez)
        app.router.add_get("/elsewhere", elsewhere)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


def _watcher(port: int, lost_after: float = 0.3) -> PeerWatcher:
    probes = Probes(
        8090, ready=(), started=Check("e", "e"), peers=(Peer("leader", "127.0.0.1", port),),
        peer_lost_seconds=lost_after,
    )  # fmt: skip
    return PeerWatcher(probes, interval=0.05, timeout=0.5, log=QuietLog())


async def _verdict_within(watcher: PeerWatcher, seconds: float) -> Verdict | None:
    try:
        return await asyncio.wait_for(watcher.run(), timeout=seconds)
    except asyncio.TimeoutError:
        return None


def test_a_redirect_is_not_a_peer_launchers_answer() -> None:
    """Before: aiohttp followed the 302 and the target's 200 kept the peer alive forever."""

    async def scenario() -> Verdict | None:
        peer = await FakePeer().start()
        watcher = _watcher(peer.port)
        task = asyncio.create_task(_verdict_within(watcher, 5))
        await asyncio.sleep(0.2)  # answered 200 once
        peer.status = 302
        verdict = await task
        await peer.stop()
        return verdict

    verdict = asyncio.run(scenario())
    assert verdict is not None and verdict.exit_code == GROUP_BROKEN.number
    assert "/livez 302: a redirect is not a launcher's answer" in verdict.reason


def test_a_peer_replaced_within_the_lost_window_is_lost_at_once() -> None:
    """Before: the recreated peer's new launcher answered 200 from its first moment, and nothing was
    noticed although the group's engines had lost their peer."""

    async def scenario() -> tuple[Verdict | None, float]:
        peer = await FakePeer().start()
        watcher = _watcher(peer.port, lost_after=60)  # far longer than the test: only the identity can tell
        task = asyncio.create_task(_verdict_within(watcher, 5))
        await asyncio.sleep(0.2)
        peer.identity = "pod-1@t1"  # same name, a new launcher
        replaced = asyncio.get_running_loop().time()
        verdict = await task
        await peer.stop()
        return verdict, asyncio.get_running_loop().time() - replaced

    verdict, after = asyncio.run(scenario())
    assert verdict is not None and verdict.exit_code == GROUP_BROKEN.number
    assert "leader (127.0.0.1) is gone: it was replaced" in verdict.reason
    assert "pod-1@t0 -> pod-1@t1" in verdict.reason
    assert after < 1


def test_the_same_launcher_answering_again_is_not_a_loss() -> None:
    async def scenario() -> Verdict | None:
        peer = await FakePeer().start()
        verdict = await _verdict_within(_watcher(peer.port), 0.6)
        await peer.stop()
        return verdict

    assert asyncio.run(scenario()) is None


def test_a_parked_peer_is_alive_and_holds_the_start_up() -> None:
    async def scenario() -> tuple[Verdict | None, str | None, str | None, float]:
        peer = await FakePeer().start()
        peer.body = {"live": True, "phase": "parked", "parked": "LLMD_RECIPE_FILE: bad key; fix it"}
        watcher = _watcher(peer.port)
        task = asyncio.create_task(_verdict_within(watcher, 10))
        for _ in range(100):  # the first read, however late a loaded machine makes it
            await asyncio.sleep(0.05)
            if (held := watcher.holds_startup()) is not None:
                break
        parked_metric = next(m for m in watcher.metrics() if m.name.endswith("peer_parked"))
        peer.body = {"live": True, "phase": "started"}
        for _ in range(100):  # ... and the read after the peer started
            await asyncio.sleep(0.05)
            if (after := watcher.holds_startup()) is None:
                break
        task.cancel()
        verdict = None if task.cancelled() or not task.done() else task.result()
        await peer.stop()
        return verdict, held, after, parked_metric.samples[0].value

    verdict, held, after, parked = asyncio.run(scenario())
    assert verdict is None  # alive: never lost
    assert held == "group member leader is parked: LLMD_RECIPE_FILE: bad key; fix it"
    assert after is None and parked == 1.0
