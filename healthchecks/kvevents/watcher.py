"""The watcher (asyncio + pyzmq): drains each rank's SUB socket synchronously when its descriptor turns
readable, so one event-loop wake-up handles a whole burst; asks the replay endpoint for gaps; calls a
rank silent when the engine served requests (the plan's served_metrics on its /metrics) and no batch
came for silence_seconds."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from healthchecks.engine_metrics import read_counters
from healthchecks.kvevents.bounds import RECEIVE_QUEUE, REPLAY_WINDOW, SLICE, bounded, take_turns
from healthchecks.kvevents.metrics import kv_event_metrics
from healthchecks.kvevents.sequence import Gap, Seen
from healthchecks.kvevents.stats import RankStats, WatcherState
from healthchecks.kvevents.wire import END_SEQ, REPLAY_TIMEOUT, Batch, BlockStored, Malformed, decode
from healthchecks.watcher import Watcher
from launcher.contract.log import Log
from launcher.contract.plan import Check, EventsFlowing, KvEventsWatch

if TYPE_CHECKING:
    import aiohttp
    import zmq
    import zmq.asyncio
    from prometheus_client.core import Metric

COALESCE = 0.05  # seconds: while a publisher is busy its batches are read in bursts, one wake-up each


class KvEventWatcher(Watcher):
    name = "kv-events"
    _ctx: zmq.Context[zmq.Socket[bytes]]  # from run() on

    def __init__(
        self,
        watch: KvEventsWatch,
        log: Log,
        host: str = "127.0.0.1",
        state: WatcherState | None = None,
        token_ids: bool = False,
    ) -> None:
        """state: carry on from an earlier watcher's counts and sequence numbers (a restart).
        token_ids: /kvevents shows recent prompts' token ids (LLMD_KV_EVENTS_TOKEN_IDS)."""
        self.watch, self.log, self.host, self.token_ids = watch, log, host, token_ids
        self.state = state or WatcherState({s.rank: RankStats(s) for s in watch.sources})
        self._sockets: list[zmq.Socket[bytes]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._replaying: set[int] = set()  # ranks with a replay request in flight
        self._logged: set[str] = set()

    # -------------------------------------------------------------- life cycle
    async def run(self) -> None:
        """Until cancelled. A failure here is logged, never the launcher's end: the engine serves on."""
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.log.error("KV-event watcher stopped", error=repr(exc))

    async def _run(self) -> None:
        import zmq

        self._ctx = zmq.Context()
        loop = asyncio.get_running_loop()
        try:
            for stats in self.state.ranks.values():
                sock = bounded(self._ctx.socket(zmq.SUB))
                sock.setsockopt(zmq.SUBSCRIBE, b"")
                sock.connect(stats.source.ipc or f"tcp://{self.host}:{stats.source.port}")
                self._sockets.append(sock)
                self._pump(sock, stats)
            await self._watch_silence()
        finally:
            # Replays first: a socket still open would make the context's termination wait forever.
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            for sock in self._sockets:
                with contextlib.suppress(Exception):
                    loop.remove_reader(sock.fileno())
            self._sockets.clear()
            self._ctx.destroy(linger=0)  # closes whatever is left, never blocks

    def _pump(self, sock: zmq.Socket[bytes], stats: RankStats) -> None:
        """Reads what is queued, for at most SLICE seconds: a flood then waits its turn behind the
        probes (bounds.py). Idle, it waits for the descriptor; busy, it comes back COALESCE seconds
        later and takes everything that piled up meanwhile in one wake-up, so a steady 200 batches/s
        costs ~20 wake-ups, not 200; a publisher that fills half the queue in less is read again at
        once. (The descriptor is edge-triggered: it is armed again only after a read that found the
        socket empty.)"""
        import zmq

        if sock.closed:  # a pump scheduled just before the watcher stopped
            return
        loop = asyncio.get_running_loop()
        handled, until, sliced = 0, time.monotonic() + SLICE, False
        while time.monotonic() < until:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            self.handle(stats, frames)
            handled += 1
        else:  # the slice is over and more may be waiting: everything else runs first
            sliced = True
        if not handled:
            loop.add_reader(sock.fileno(), self._pump, sock, stats)
            return
        loop.remove_reader(sock.fileno())
        if sliced or handled >= RECEIVE_QUEUE // 2:  # filling faster than one COALESCE wait drains
            loop.call_soon(self._pump, sock, stats)
        else:
            loop.call_later(COALESCE, self._pump, sock, stats)

    # -------------------------------------------------------------- one message
    def handle(self, stats: RankStats, frames: list[bytes], replayed: bool = False) -> bool:
        """True when a replayed batch filled a gap."""
        try:
            batch = decode(frames)
        except Malformed as exc:
            self.state.malformed[exc.kind] += 1
            self._once(
                f"malformed:{exc.kind}", "malformed KV-event message", rank=stats.source.rank, error=str(exc)
            )
            return False
        if replayed:
            if batch.seq not in stats.pending:
                return False  # arrived live meanwhile, or from a publisher that has since restarted
            stats.pending.discard(batch.seq)
            stats.recovered += 1
            self._count(stats, batch)
            return True
        outcome = stats.tracker.see(batch.seq)
        if outcome is Seen.OLD:
            return False
        if outcome is Seen.RESET:
            stats.resets += 1
            stats.lost += len(stats.pending)  # the old publisher's replay buffer is gone with it
            stats.pending.clear()
            self.log.warning("KV-event publisher restarted (sequence back to 0)", rank=stats.source.rank)
        elif isinstance(outcome, Gap):
            self._on_gap(stats, outcome)
        stats.last_seq = batch.seq
        self._count(stats, batch)
        return False

    def _count(self, stats: RankStats, batch: Batch) -> None:
        stats.batches += 1
        stats.last_batch_at = time.monotonic()
        stats.served_since_batch = False
        if stats.silent:
            stats.silent = False
            self.log.info("KV events flowing again", rank=stats.source.rank)
        counts, stored = stats.events, None
        for event in batch.events:
            counts[event.type] += 1
            if isinstance(event, BlockStored):
                stored = event
        if stored is not None:  # the batch's last one, formatted only when /kvevents is asked
            self.state.recent.append((stats.source.rank, batch.seq, stored))
            if stored.block_size is not None and stored.block_size != stats.block_size:
                self._on_block_size(stats, stored.block_size)

    def _on_block_size(self, stats: RankStats, block_size: int) -> None:
        """The router hashes prompts in blocks of blockSizeTokens; events in blocks of another size
        never match its hashes, so precise prefix-cache routing silently misses (llm-d/llm-d #2203)."""
        stats.block_size = block_size
        expected = self.watch.block_size
        stats.block_size_mismatch = expected is not None and block_size != expected
        if stats.block_size_mismatch:
            self._once(
                f"block-size:{stats.source.rank}",
                "KV-event block size differs from the router's blockSizeTokens",
                rank=stats.source.rank,
                block_size=block_size,
                router_block_size_tokens=expected,
            )

    # -------------------------------------------------------------- gaps and replay
    def _on_gap(self, stats: RankStats, gap: Gap) -> None:
        stats.gaps += 1
        stats.missed += gap.size
        source = stats.source
        if source.replay_port is None:
            stats.lost += gap.size
            self._once(
                f"no-replay:{source.rank}", "KV-event batches missed and no replay endpoint", rank=source.rank
            )
            return
        first = max(gap.first, gap.last + 1 - REPLAY_WINDOW)  # older ones are in no replay buffer
        stats.lost += first - gap.first
        stats.pending.update(range(first, gap.last + 1))
        if len(stats.pending) > REPLAY_WINDOW:
            oldest = sorted(stats.pending)[: len(stats.pending) - REPLAY_WINDOW]
            stats.pending.difference_update(oldest)
            stats.lost += len(oldest)
        if source.rank not in self._replaying:
            self._replaying.add(source.rank)
            task = asyncio.get_running_loop().create_task(self._replay(stats))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _replay(self, stats: RankStats) -> None:
        """One request at a time per rank: gaps found meanwhile are asked for by the next one."""
        try:
            while stats.pending:
                await self._replay_once(stats, set(stats.pending))
        finally:
            self._replaying.discard(stats.source.rank)

    async def _replay_once(self, stats: RankStats, asked: set[int]) -> None:
        import zmq
        import zmq.asyncio

        sock = zmq.asyncio.Socket.shadow(bounded(self._ctx.socket(zmq.DEALER)))
        sock.connect(stats.source.replay_ipc or f"tcp://{self.host}:{stats.source.replay_port}")
        first, last, recovered = min(asked), max(asked), 0
        try:
            await sock.send_multipart([b"", first.to_bytes(8, "big")])
            until = time.monotonic() + SLICE
            while True:
                until = await take_turns(until)
                frames = await asyncio.wait_for(sock.recv_multipart(), timeout=REPLAY_TIMEOUT)
                frames = frames[1:] if frames and frames[0] == b"" else frames  # the DEALER delimiter
                if len(frames) == 3 and frames[0] == b"" and int.from_bytes(frames[1], "big") == END_SEQ:
                    break
                recovered += self.handle(stats, frames, replayed=True)
        except asyncio.TimeoutError:
            self.log.warning("KV-event replay timed out", rank=stats.source.rank, waited_s=REPLAY_TIMEOUT)
        finally:
            sock.close(0)
            # Still missing: expired from the publisher's buffer, or the replay failed. (A publisher
            # restart meanwhile already counted its gap's batches as lost.)
            missing = asked & stats.pending
            stats.pending.difference_update(missing)
            stats.lost += len(missing)
            (self.log.info if not missing else self.log.warning)(
                "KV-event gap replayed",
                rank=stats.source.rank,
                first=first,
                last=last,
                recovered=recovered,
                lost=len(missing),
            )

    # -------------------------------------------------------------- silence
    async def _watch_silence(self) -> None:
        """No batch for `silence_seconds` while the engine served requests: the stream has stopped."""
        import aiohttp

        every = max(1.0, self.watch.silence_seconds / 4)
        async with aiohttp.ClientSession() as session:
            while True:
                await asyncio.sleep(every)
                for stats in self.state.ranks.values():
                    count = await _requests_served(
                        session, self.host, stats.source.api_port, self.watch.served_metrics
                    )
                    if count is None:
                        continue
                    if stats.requests_served is not None and count > stats.requests_served:
                        stats.served_since_batch = True
                    stats.requests_served = count
                    self._check_silence(stats)

    def _check_silence(self, stats: RankStats) -> None:
        quiet_since = stats.last_batch_at
        now = time.monotonic()
        if not stats.served_since_batch or stats.silent:
            return
        if quiet_since is None or now - quiet_since >= self.watch.silence_seconds:
            stats.silent = True
            self.log.warning(
                "KV events silent while the engine serves requests",
                rank=stats.source.rank,
                port=stats.source.port,
                seconds_since_last_batch=None if quiet_since is None else round(now - quiet_since, 1),
            )

    def flowing(self) -> tuple[bool, str]:
        """For readiness, as the recipe asks: no rank silent once a request was served (kv_events
        readiness), and no rank publishing blocks of another size than the router's (router readiness)."""
        ranks = self.state.ranks.values()
        wrong = {s.source.rank: s.block_size for s in ranks if s.block_size_mismatch}
        if self.watch.block_size_readiness and wrong:
            return False, (
                f"KV-event block size {wrong} differs from the router's blockSizeTokens "
                f"{self.watch.block_size}"
            )
        silent = [s.source.rank for s in ranks if s.silent] if self.watch.readiness else []
        if silent:
            return False, f"no KV events from rank(s) {silent} while requests were served"
        return True, "KV events flowing (or no request served yet)"

    def _once(self, key: str, message: str, **fields: Any) -> None:
        if key not in self._logged:
            self._logged.add(key)
            self.log.warning(message + " (logged once)", **fields)

    # -------------------------------------------------------------- the watcher protocol
    def answer(self, check: Check) -> tuple[bool, str] | None:
        return self.flowing() if isinstance(check.request, EventsFlowing) else None

    def details(self) -> dict[str, Any]:
        return self.state.as_dict(time.monotonic(), token_ids=self.token_ids)

    def metrics(self) -> Iterable[Metric]:
        return kv_event_metrics(self.state, self.watch.identity)


async def _requests_served(
    session: aiohttp.ClientSession, host: str, port: int, families: Sequence[str]
) -> float | None:
    """Requests this rank finished or is running (the sum of the plan's served-request families on
    the engine's /metrics); None when it does not answer."""
    samples = tuple(name for family in families for name in (family, family + "_total"))  # counters: _total
    total, failed = await read_counters(session, host, port, samples, timeout=5)
    return None if failed is not None else total or 0.0
