"""What a KV-event publisher can make the watcher hold (healthchecks/kvevents/bounds.py): missing
batches asked of the replay endpoint are bounded by its window, and one request per rank is in flight
at a time. The flood itself (memory, probes): tests/supervisor/test_kv_events.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog
import zmq
from msgspec.msgpack import encode

from healthchecks.kvevents.bounds import REPLAY_WINDOW
from healthchecks.kvevents.stats import RankStats
from healthchecks.kvevents.watcher import KvEventWatcher
from healthchecks.kvevents.wire import END_SEQ
from launcher.contract.plan import KvEventSource, KvEventsWatch

Scenario = Callable[[KvEventWatcher, RankStats, zmq.Socket[bytes], zmq.Socket[bytes]], Awaitable[None]]


def with_watcher(scenario: Scenario) -> None:
    """Runs `scenario(watcher, rank 0's stats, publisher, replay endpoint)` with the watcher
    subscribed to a PUB socket and asking a ROUTER (the replay endpoint) that answers only when the
    scenario does."""
    ctx = zmq.Context()
    pub, router = ctx.socket(zmq.PUB), ctx.socket(zmq.ROUTER)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    replay = router.bind_to_random_port("tcp://127.0.0.1")
    watch = KvEventsWatch((KvEventSource(0, port, replay, 1),), silence_seconds=60)

    async def run() -> None:
        watcher = KvEventWatcher(watch, structlog.get_logger())
        task = asyncio.create_task(watcher.run())
        try:
            await scenario(watcher, watcher.state.ranks[0], pub, router)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    try:
        asyncio.run(run())
    finally:
        ctx.destroy(linger=0)


async def publish_until(pub: zmq.Socket[bytes], seq: int, seen: Callable[[], bool]) -> None:
    """Sends batch `seq` until the watcher has seen it (the subscription may not be connected yet)."""
    for _ in range(100):
        pub.send_multipart([b"kv@x", seq.to_bytes(8, "big"), encode([1.0, [], 0])])
        await asyncio.sleep(0.05)
        if seen():
            return
    raise AssertionError(f"the watcher never saw batch {seq}")


async def requests(router: zmq.Socket[bytes], wait: float, expect: int = 0) -> list[tuple[bytes, int]]:
    """The replay requests that arrived: (client, first sequence number asked). With `expect`, as soon
    as that many came (10 s at most: a loaded machine delays them), then `wait` s more for any extra
    one; without, those that came within `wait` s (what must not come)."""
    found: list[tuple[bytes, int]] = []
    deadline = asyncio.get_running_loop().time() + 10
    while len(found) < expect and asyncio.get_running_loop().time() < deadline:
        found += _received(router)
        await asyncio.sleep(0.02)
    await asyncio.sleep(wait)
    return found + _received(router)


def _received(router: zmq.Socket[bytes]) -> list[tuple[bytes, int]]:
    found = []
    while router.poll(0):
        client, _, start = router.recv_multipart()
        found.append((client, int.from_bytes(start, "big")))
    return found


def test_a_gap_wider_than_any_replay_buffer_asks_only_for_its_window() -> None:
    """A first batch numbered far past 0 (a publisher that ran long before us, or a hostile jump to
    2**63) is a gap from 0: only its last REPLAY_WINDOW batches can still be in a replay buffer, so
    only those are kept pending and asked for; the rest are lost at once."""
    first = 3 * REPLAY_WINDOW

    async def scenario(
        watcher: KvEventWatcher, stats: RankStats, pub: zmq.Socket[bytes], router: zmq.Socket[bytes]
    ) -> None:
        await publish_until(pub, first, lambda: stats.gaps > 0)
        assert (stats.missed, stats.lost) == (first, first - REPLAY_WINDOW)
        assert stats.pending == set(range(first - REPLAY_WINDOW, first))
        assert [start for _, start in await requests(router, 0.2, expect=1)] == [first - REPLAY_WINDOW]

    with_watcher(scenario)


def test_one_replay_request_per_rank_at_a_time() -> None:
    """Under a flood every dropped run of batches is a gap: a request per gap would be a replay storm.
    A gap found while a request is in flight waits for it, and the next request asks from there."""

    async def scenario(
        watcher: KvEventWatcher, stats: RankStats, pub: zmq.Socket[bytes], router: zmq.Socket[bytes]
    ) -> None:
        await publish_until(pub, 5, lambda: stats.gaps == 1)  # 0..4 missing
        [(client, start)] = await requests(router, 0.2, expect=1)
        assert start == 0
        await publish_until(pub, 10, lambda: stats.gaps == 2)  # 6..9 missing too
        assert await requests(router, 0.5) == []  # the first request is still unanswered
        router.send_multipart([client, b"", b"", END_SEQ.to_bytes(8, "big"), b""])  # nothing kept
        assert [start for _, start in await requests(router, 0.2, expect=1)] == [6]
        assert stats.lost == 5 and stats.pending == {6, 7, 8, 9}

    with_watcher(scenario)


def test_the_relay_lets_the_event_loop_run_while_a_publisher_floods() -> None:
    """An awaited ZMQ receive that finds a message queued returns without yielding: under a flood the
    IPv6 relay's forwarding loop would hold the event loop (and the probes) for as long as the flood
    lasts. It takes turns: a ticker on the same loop keeps ticking."""
    import threading
    import time

    import zmq.asyncio

    from healthchecks.kvevents.relay import KvEventRelay

    ctx = zmq.asyncio.Context()
    flood, stop = zmq.Context(), threading.Event()
    pub = flood.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")

    def publish() -> None:  # for 2 s at most: a loop held throughout is then a failure, not a hang
        payload, until = encode([1.0, [], 0]), time.monotonic() + 2
        while not stop.is_set() and time.monotonic() < until:
            for seq in range(1000):
                pub.send_multipart([b"kv@x", seq.to_bytes(8, "big"), payload])

    async def scenario() -> float:
        upstream, public = ctx.socket(zmq.SUB), ctx.socket(zmq.PUB)
        upstream.setsockopt(zmq.SUBSCRIBE, b"")
        upstream.connect(f"tcp://127.0.0.1:{port}")
        public.bind("tcp://127.0.0.1:*")
        await asyncio.sleep(0.3)  # subscribed
        sender = threading.Thread(target=publish)
        sender.start()
        relay = asyncio.create_task(KvEventRelay._forward(upstream, public))
        slowest, last = 0.0, time.monotonic()
        try:
            for _ in range(30):  # ~1.5 s of ticks
                await asyncio.sleep(0.05)
                now = time.monotonic()
                slowest, last = max(slowest, now - last), now
        finally:
            stop.set()
            relay.cancel()
            await asyncio.gather(relay, return_exceptions=True)
            sender.join()
            # Closed on the loop that polled them, before it closes: destroying the context afterwards
            # with them open aborted libzmq once (a worker's "Fatal Python error: Aborted" in term()).
            upstream.close(linger=0)
            public.close(linger=0)
        return slowest

    try:
        slowest = asyncio.run(scenario())
    finally:
        ctx.destroy(linger=0)
        flood.destroy(linger=0)
    assert slowest < 1.0, f"the event loop was held {slowest:.2f} s"  # a loaded machine: not 0.05
