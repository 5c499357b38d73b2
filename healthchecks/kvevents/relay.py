"""The IPv6 relay of KV events and their replay endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import TYPE_CHECKING

from healthchecks.kvevents.bounds import SLICE, bounded, take_turns
from healthchecks.kvevents.wire import END_SEQ, REPLAY_TIMEOUT
from healthchecks.watcher import Watcher
from launcher.contract.log import Log
from launcher.contract.plan import KvEventsWatch

if TYPE_CHECKING:
    import zmq.asyncio


class KvEventRelay(Watcher):
    """IPv6 pods: vLLM 0.32.0 binds tcp://*:N without zmq.IPV6 (vllm/distributed/kv_events.py `_bind`),
    so it listens on IPv4 only and the router could never subscribe. The engine publishes on ipc://
    instead; this relays each rank on a dual-stack tcp://*:port, frames untouched, and answers replay
    requests on tcp://*:replay_port by asking the engine's ROUTER for the caller (vLLM's ROUTER wants
    exactly [identity, "", start], so a plain ROUTER-DEALER proxy's extra envelope would be refused)."""

    name = "kv-event-relay"

    def __init__(self, watch: KvEventsWatch, log: Log) -> None:
        self.sources = [s for s in watch.sources if s.ipc]
        self.log = log
        for source in self.sources:  # the engine binds its ipc:// sockets there as it starts
            for endpoint in (source.ipc, source.replay_ipc):
                if endpoint:
                    os.makedirs(os.path.dirname(endpoint.removeprefix("ipc://")), exist_ok=True)

    async def run(self) -> None:
        import zmq
        import zmq.asyncio

        ctx = zmq.asyncio.Context()
        tasks = []
        try:
            for source in self.sources:
                assert source.ipc is not None
                upstream = bounded(ctx.socket(zmq.SUB))
                upstream.setsockopt(zmq.SUBSCRIBE, b"")
                upstream.connect(source.ipc)
                public = ctx.socket(zmq.PUB)
                public.setsockopt(zmq.IPV6, 1)
                public.bind(f"tcp://*:{source.port}")
                tasks.append(asyncio.create_task(self._forward(upstream, public)))
                if source.replay_ipc and source.replay_port:
                    router = ctx.socket(zmq.ROUTER)
                    router.setsockopt(zmq.IPV6, 1)
                    router.bind(f"tcp://*:{source.replay_port}")
                    tasks.append(asyncio.create_task(self._replays(ctx, router, source.replay_ipc)))
                self.log.info(
                    "relaying KV events on dual-stack TCP",
                    rank=source.rank,
                    port=source.port,
                    replay_port=source.replay_port,
                    engine=source.ipc,
                )
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the engine serves on; the router just sees no events
            self.log.error("KV-event relay stopped", error=repr(exc))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            ctx.destroy(linger=0)

    @staticmethod
    async def _forward(upstream: zmq.asyncio.Socket, public: zmq.asyncio.Socket) -> None:
        until = time.monotonic() + SLICE
        while True:
            await public.send_multipart(await upstream.recv_multipart(copy=True))
            until = await take_turns(until)

    async def _replays(self, ctx: zmq.asyncio.Context, router: zmq.asyncio.Socket, engine: str) -> None:
        while True:
            frames = await router.recv_multipart()
            if len(frames) != 3:
                continue
            client, _, start = frames
            with contextlib.suppress(asyncio.TimeoutError):
                await self._replay_one(ctx, router, engine, client, start)

    @staticmethod
    async def _replay_one(
        ctx: zmq.asyncio.Context, router: zmq.asyncio.Socket, engine: str, client: bytes, start: bytes
    ) -> None:
        import zmq

        dealer = bounded(ctx.socket(zmq.DEALER))
        dealer.connect(engine)
        try:
            await dealer.send_multipart([b"", start])
            until = time.monotonic() + SLICE
            while True:
                until = await take_turns(until)
                reply = await asyncio.wait_for(dealer.recv_multipart(), timeout=REPLAY_TIMEOUT)
                reply = reply[1:] if reply and reply[0] == b"" else reply
                await router.send_multipart([client, b"", *reply])
                if len(reply) == 3 and reply[0] == b"" and int.from_bytes(reply[1], "big") == END_SEQ:
                    return
        finally:
            dealer.close(0)
