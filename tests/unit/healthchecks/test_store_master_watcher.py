"""StoreMasterWatcher against a loopback stand-in of Mooncake's embedded HTTP metadata server (keys in
memory: PUT stores, GET answers 404 "metadata not found" for a key it does not hold, as the real one,
tests/group/test_mooncake_group.py). A restart is the server losing its keys: a donor's watcher then
ends the pod with exit code 7; an engine's counts it and keeps watching."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace

from aiohttp import web
from prometheus_client import generate_latest

from healthchecks.metrics import build_registry
from healthchecks.pod_watchers import build_watchers
from healthchecks.state import PodHealth
from healthchecks.store_master import StoreMasterWatcher
from launcher.contract.exits import STORE_MASTER_RESTARTED
from launcher.contract.plan import StoreMaster
from roles import build_plan
from tests.ports import free_port
from tests.unit.healthchecks.loopback import QuietLog
from tests.unit.healthchecks.test_watchers import KIMI, _prefill_leader


class MetadataServer:
    """Mooncake's metadata server's /metadata, its keys lost by `restart` (and by stop + start)."""

    def __init__(self, port: int) -> None:
        self.port, self.keys = port, dict[str, bytes]()
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        async def metadata(request: web.Request) -> web.Response:
            key = request.query["key"]
            if request.method == "PUT":
                self.keys[key] = await request.read()
                return web.Response(text="metadata updated")
            if key not in self.keys:
                return web.Response(status=404, text="metadata not found")
            return web.Response(body=self.keys[key])

        app = web.Application()
        app.router.add_route("*", "/metadata", metadata)
        runner = self.runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()
        self.keys.clear()


def _watcher(port: int, *, reregister: bool) -> StoreMasterWatcher:
    master = StoreMaster(
        name="mooncake master",
        rpc="127.0.0.1:50051",
        metadata_server=f"http://127.0.0.1:{port}/metadata",
        setting="pools.donor.master",
        fix="start it",
        reregister=reregister,
    )
    return StoreMasterWatcher(master, "pod-a-1", interval=0.05, timeout=2, log=QuietLog())


async def _until(condition: Callable[[], bool], timeout: float = 20) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.02)

    await asyncio.wait_for(poll(), timeout)


def _scenario(body: Callable[[MetadataServer], Awaitable[None]]) -> None:
    async def run() -> None:
        server = MetadataServer(free_port())
        await server.start()
        try:
            await body(server)
        finally:
            await server.stop()

    asyncio.run(run())


def test_a_donor_ends_the_pod_once_the_master_forgot_its_marker() -> None:
    async def body(server: MetadataServer) -> None:
        watcher = _watcher(server.port, reregister=True)
        task = asyncio.create_task(watcher.run())
        await _until(lambda: watcher.marked)
        assert list(server.keys) == ["llm-d-launcher/marker/pod-a-1"]
        await asyncio.sleep(0.2)
        assert not task.done() and watcher.not_live() is None  # the marker reads back: no restart
        server.keys.clear()  # the master restarted
        verdict = await asyncio.wait_for(task, 5)
        assert verdict is not None and verdict.exit_code == STORE_MASTER_RESTARTED.number == 7
        assert verdict.reason.startswith("mooncake master 127.0.0.1:50051 restarted")
        assert watcher.not_live() == verdict.reason and watcher.restarts == 1

    _scenario(body)


def test_an_engine_counts_each_restart_and_keeps_watching() -> None:
    async def body(server: MetadataServer) -> None:
        watcher = _watcher(server.port, reregister=False)
        task = asyncio.create_task(watcher.run())
        for restarts in (1, 2):
            await _until(lambda: watcher.marked)
            server.keys.clear()
            await _until(lambda count=restarts: watcher.restarts == count)  # type: ignore[misc]
            await _until(lambda: bool(server.keys))  # written again, to see the next one
            await asyncio.sleep(0.2)  # four rounds: one restart is counted once
            assert watcher.restarts == restarts
        assert not task.done() and watcher.not_live() is None
        task.cancel()

    _scenario(body)


def test_a_master_down_and_back_empty_is_a_restart_and_one_never_marked_is_not() -> None:
    async def body(server: MetadataServer) -> None:
        watcher = _watcher(server.port, reregister=False)
        unmarked = _watcher(free_port(), reregister=False)  # nothing there to write to
        tasks = [asyncio.create_task(w.run()) for w in (watcher, unmarked)]
        await _until(lambda: watcher.marked)
        await server.stop()
        await _until(lambda: not watcher.up)
        assert watcher.restarts == 0 and "refused" in watcher.details()["detail"]
        await server.start()  # a new master: no keys
        await _until(lambda: watcher.restarts == 1)
        assert unmarked.restarts == 0 and not unmarked.up
        for task in tasks:
            task.cancel()

    _scenario(body)


def test_the_restarts_are_on_metrics() -> None:
    async def body(server: MetadataServer) -> None:
        watcher = _watcher(server.port, reregister=False)
        task = asyncio.create_task(watcher.run())
        await _until(lambda: watcher.marked)
        server.keys.clear()
        await _until(lambda: watcher.restarts == 1)
        task.cancel()
        probes = build_plan(_prefill_leader(), KIMI).probes
        assert probes is not None
        health = PodHealth(probes)
        health.watchers = (watcher,)
        text = generate_latest(build_registry(health)[0]).decode()
        assert 'llmd_launcher_store_master_restarts_total{master="127.0.0.1:50051"} 1.0' in text
        assert 'llmd_launcher_store_master_up{master="127.0.0.1:50051"} 1.0' in text

    _scenario(body)


def test_the_factory_watches_a_master_only_with_an_http_metadata_server() -> None:
    settings = _prefill_leader(check_interval=0.7, check_timeout=0.3)
    plan = build_plan(settings, KIMI)
    assert plan.probes is not None and plan.needs.store_master is not None
    watchers = build_watchers(plan, PodHealth(plan.probes), settings, QuietLog(), parks=False)
    (watcher,) = [w for w in watchers if isinstance(w, StoreMasterWatcher)]  # wherever it stands
    assert (watcher.interval, watcher.timeout, watcher.master.reregister) == (0.7, 0.3, False)
    assert watcher.url.startswith("http://mooncake-master:8080/metadata?key=llm-d-launcher%2Fmarker%2F")
    p2p = replace(plan.needs.store_master, metadata_server=None)
    plan = replace(plan, needs=replace(plan.needs, store_master=p2p))
    names = [w.name for w in build_watchers(plan, PodHealth(plan.probes), settings, QuietLog(), parks=False)]
    assert "store_master" not in names
