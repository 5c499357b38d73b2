"""The forward watch's cadence against an API server that stops answering (issue #25 part 2), with a
stand-in engine on loopback whose /metrics and completions can hang, as a SIGSTOPped server's do: a
read in flight does not hold the ticks, so the stall is told within stall + canary + one interval
and not one read timeout later; the canary still judges (an answered canary is progress, however
long /metrics stays unanswered); the canary goes when the window ends, not at the first tick
after it; an API server busy at its last answer is not canaried while its
read is merely in flight; one read per API server is in flight at a time."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiohttp import web

from healthchecks.forward import ForwardWatcher
from launcher.contract.plan import ProgressSource, ProgressWatch
from tests.ports import free_port
from tests.unit.healthchecks.loopback import QuietLog, completion_canary, serve_engine

COUNTERS = ("vllm:generation_tokens_total",)
BUSY = ("vllm:num_requests_running",)
INTERVAL, STALL, CANARY = 0.05, 0.3, 0.3
READ_TIMEOUT = 5.0  # far longer than stall + canary: a verdict held by it comes seconds late
SLACK = 0.35  # scheduling on a loaded machine


@dataclass
class StandIn:
    """vLLM's /metrics and /v1/completions; `hang` holds every request until `release`, as a
    stopped API server does."""

    tokens: float = 0.0
    running: float = 0.0
    moving: bool = True  # the counters advance on every answered scrape
    canary_status: int = 200
    hang_metrics: bool = False
    hang_completions: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)
    hung_reads: int = 0  # reads begun while /metrics hangs
    in_flight: int = 0
    most_in_flight: int = 0
    canaries_at: list[float] = field(default_factory=list)

    async def metrics(self, _request: web.Request) -> web.Response:
        self.hung_reads += self.hang_metrics
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.hang_metrics:
                await self.release.wait()
            self.tokens += 7 if self.moving else 0
            text = f"vllm:generation_tokens_total {self.tokens}\nvllm:num_requests_running {self.running}\n"
            return web.Response(text=text)
        finally:
            self.in_flight -= 1

    async def completions(self, _request: web.Request) -> web.Response:
        self.canaries_at.append(asyncio.get_running_loop().time())
        if self.hang_completions:
            await self.release.wait()
        return web.json_response({"choices": [{"text": "!"}]}, status=self.canary_status)


def _watcher(port: int, read_timeout: float, interval: float) -> ForwardWatcher:
    watch = ProgressWatch(
        (ProgressSource("rank 0", port),), COUNTERS, completion_canary(), STALL, CANARY, busy=BUSY
    )
    return ForwardWatcher(watch, lambda: True, interval, read_timeout, QuietLog())


async def _scenario(
    engine: StandIn,
    served: float,
    stop: dict[str, bool],
    watched: float,
    read_timeout: float = READ_TIMEOUT,
    interval: float = INTERVAL,
) -> tuple[ForwardWatcher, float | None, float]:
    """Serve normally for `served` seconds, then set `stop`'s flags on the stand-in and watch until a
    verdict or `watched` more seconds: (the watcher, seconds from the stop to its verdict, when it
    stopped on the loop's clock)."""
    port = free_port()
    runner = await serve_engine(engine, port)
    watcher = _watcher(port, read_timeout, interval)
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(watcher.run())
    try:
        await asyncio.sleep(served)
        for name, value in stop.items():
            setattr(engine, name, value)
        stopped = loop.time()
        await asyncio.wait({task}, timeout=watched)
        took = loop.time() - stopped if task.done() else None
        if task.done():
            task.result()
        return watcher, took, stopped
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        engine.release.set()
        await runner.cleanup()


def test_a_stopped_api_server_is_stalled_within_stall_plus_canary_plus_one_interval() -> None:
    engine = StandIn()

    async def run() -> tuple[ForwardWatcher, float | None, float]:
        return await _scenario(engine, 0.3, {"hang_metrics": True, "hang_completions": True}, 3.0)

    watcher, took, _ = asyncio.run(run())
    assert took is not None, "no verdict within 3 s of the stop"
    assert took < STALL + CANARY + INTERVAL + SLACK, took  # not READ_TIMEOUT (5 s) later
    assert watcher.stalled is not None and "its canary timed out after 0.3 s" in watcher.stalled
    assert "/metrics: GET /metrics unanswered for " in watcher.stalled
    assert engine.most_in_flight == 1  # the hung read was not stacked upon


def test_an_unanswered_metrics_leaves_the_canary_the_judge() -> None:
    engine = StandIn()

    async def run() -> tuple[ForwardWatcher, float | None, float]:
        return await _scenario(engine, 0.2, {"hang_metrics": True}, 1.5)

    watcher, took, stopped = asyncio.run(run())
    assert took is None and watcher.stalled is None  # each canary answered: progress
    after_stop = [t - stopped for t in engine.canaries_at]
    assert len(after_stop) >= 3, after_stop  # one per window while /metrics stays unanswered
    assert after_stop[0] < STALL + INTERVAL + SLACK, after_stop
    assert engine.hung_reads == 1 and engine.most_in_flight == 1  # one read, waited for, not stacked
    assert watcher.details()["rank 0"]["metrics"].startswith("GET /metrics unanswered for ")


def test_an_api_server_busy_at_its_last_answer_is_not_canaried_while_its_read_is_in_flight() -> None:
    # A long prefill holds the counters still while requests run; one slow /metrics must not send
    # a canary that would queue behind it. Once the read fails (its timeout), the canary judges.
    engine = StandIn(running=1, moving=False, canary_status=500)  # a canary is a stall

    async def run() -> tuple[ForwardWatcher, float | None, float]:
        return await _scenario(engine, STALL + 0.2, {"hang_metrics": True}, 3.0, read_timeout=1.0)

    watcher, took, stopped = asyncio.run(run())
    assert len(engine.canaries_at) == 1 and watcher.stalled is not None
    assert "/metrics: GET /metrics: no answer within 1 s" in watcher.stalled
    assert took is not None and took >= 1.0 - INTERVAL  # the read's timeout, then the canary
    assert engine.canaries_at[0] - stopped >= 1.0 - INTERVAL


def test_the_canary_goes_when_the_window_ends_not_at_the_next_tick() -> None:
    # Ticks 2 s apart, a 0.3 s window: a canary held for the next tick would come 1.7 s late.
    engine = StandIn(moving=False)

    async def run() -> tuple[ForwardWatcher, float | None, float]:
        return await _scenario(engine, 0.1, {"hang_completions": True}, 3.0, interval=2.0)

    watcher, took, stopped = asyncio.run(run())
    assert len(engine.canaries_at) == 1 and watcher.stalled is not None
    assert engine.canaries_at[0] - stopped < STALL + SLACK  # the first look was 0.1 s before the stop
    assert took is not None and took < STALL + CANARY + SLACK
