"""The KV store's master is checked before start: its RPC port must accept a connection and its HTTP
metadata server must answer (any HTTP status: Mooncake's says 404 "metadata not found" for an unknown
key). Against loopback listeners in the test's own process; the real mooncake_master is the group
tier's (tests/group/test_mooncake_group.py)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest
from aiohttp import web

from launcher.contract.plan import StoreMaster
from launcher.supervise.preflight import wait_for_store_master
from tests.ports import free_port
from tests.unit.healthchecks.loopback import QuietLog


def _master(rpc: int, metadata: int | None) -> StoreMaster:
    return StoreMaster(
        name="mooncake master",
        rpc=f"127.0.0.1:{rpc}",
        metadata_server=None if metadata is None else f"http://127.0.0.1:{metadata}/metadata",
        setting="pools.p.master",
        fix="start the mooncake-master pool",
        reregister=True,
    )


@pytest.fixture
def rpc_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


async def _metadata_server(port: int) -> web.AppRunner:
    """Answers as Mooncake's embedded metadata server does for a key nobody wrote."""

    async def unknown_key(_request: web.Request) -> web.Response:
        return web.Response(status=404, text="metadata not found")

    app = web.Application()
    app.router.add_get("/metadata", unknown_key)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def test_a_master_not_there_is_named_with_the_fix() -> None:
    problem = asyncio.run(wait_for_store_master(_master(free_port(), None), 30, QuietLog(), once=True))
    assert problem is not None and problem.setting == "mooncake master"
    assert (
        "does not accept a connection" in problem.message and problem.fix == "start the mooncake-master pool"
    )


def test_the_metadata_server_must_answer_too(rpc_port: int) -> None:
    metadata = free_port()
    problem = asyncio.run(wait_for_store_master(_master(rpc_port, metadata), 30, QuietLog(), once=True))
    assert problem is not None and f"metadata server http://127.0.0.1:{metadata}/metadata" in problem.message

    async def with_server() -> object:
        runner = await _metadata_server(metadata)
        try:
            return await wait_for_store_master(_master(rpc_port, metadata), 30, QuietLog(), once=True)
        finally:
            await runner.cleanup()

    assert asyncio.run(with_server()) is None


def test_a_master_that_comes_up_later_is_waited_for_and_one_that_never_does_is_not_forever() -> None:
    port = free_port()

    async def late_master() -> tuple[object, float]:
        started = time.monotonic()
        waiting = asyncio.create_task(wait_for_store_master(_master(port, None), 20, QuietLog()))
        await asyncio.sleep(1.5)
        server = await asyncio.start_server(lambda _r, w: w.close(), "127.0.0.1", port)
        async with server:
            return await waiting, time.monotonic() - started

    problem, took = asyncio.run(late_master())
    assert problem is None and 1.5 <= took < 5
    started = time.monotonic()
    problem = asyncio.run(wait_for_store_master(_master(free_port(), None), 1.5, QuietLog()))
    assert problem is not None and "LLMD_STORE_MASTER_WAIT_SECONDS=1.5" in problem.message
    assert 1.5 <= time.monotonic() - started < 4
