"""Forward progress: does the serving engine still produce tokens? (the plan's ProgressWatch)

A hung GPU or TP peer, a blocked KV transfer or a deadlocked scheduler leaves the engine's process
running and its /health at 200 (vLLM 0.32 answers /health from the API server; with its engine core
SIGSTOPped every request hangs until VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, 300 s). What does change
while an engine works is its own token counters on /metrics. So, per API server:

- the counters moved since the last look: progress, nothing is sent;
- they stood still for `stall_seconds` (an idle engine, or a stuck one): one canary, the smallest real
  request (POST /v1/completions, max_tokens 1), with its own deadline. It comes back: progress. It
  fails or times out: the engine is stalled, /livez turns 503 naming the server, and the verdict
  ends the pod, stopping the engine as a stalled one (EngineStop.STALLED).

A busy engine is never canaried; an idle one costs one token per `stall_seconds`. Watching begins when
start-up has ended and stops with the first stall.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client.core import Metric

from healthchecks.engine_metrics import read_counters
from healthchecks.metrics import FORWARD_CANARIES, FORWARD_LAST_PROGRESS, FORWARD_STALLED, wall_time
from healthchecks.watcher import Watcher
from launcher.contract.exits import STALLED
from launcher.contract.log import Log
from launcher.contract.plan import ProgressSource, ProgressWatch
from launcher.contract.stop import EngineStop, Verdict

if TYPE_CHECKING:
    from aiohttp import ClientSession

CANARY_PROMPT = "Hi"  # a fixed, tiny prompt: one or two tokens in any tokenizer
CANARY_AGENT = "llm-d-launcher-canary"  # so the engine's access log says who sent it


@dataclass
class SourceState:
    source: ProgressSource
    tokens: float | None = None  # the counters' sum at the last look (None: not read yet)
    progress_at: float | None = None  # when they last moved, or a canary came back
    read: str = "not read yet"  # the latest /metrics outcome
    canary: str = "none sent"  # the latest canary's outcome
    canaries: Counter[str] = field(default_factory=Counter)  # by outcome: ok, failed

    def as_dict(self, now: float) -> dict[str, Any]:
        since = None if self.progress_at is None else round(now - self.progress_at, 1)
        return {
            "port": self.source.port,
            "seconds_since_progress": since,
            "metrics": self.read,
            "canary": self.canary,
        }


class ForwardWatcher(Watcher):
    name = "forward"

    def __init__(
        self,
        watch: ProgressWatch,
        started: Callable[[], bool],
        interval: float,
        timeout: float,
        log: Log,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """started(): whether start-up has ended; timeout: for reading /metrics (the canary has its own)."""
        self.watch = watch
        self.states = [SourceState(s) for s in watch.sources]
        self.started, self.interval, self.timeout = started, interval, timeout
        self.log, self.clock = log, clock
        self.stalled: str | None = None  # the verdict, once given
        self.stalled_source: str | None = None  # the API server it is about

    async def run(self) -> Verdict:
        """Until a stall (its verdict) or the task is cancelled."""
        import aiohttp

        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            while self.stalled is None:
                if self.started():
                    await asyncio.gather(*(self.check(session, state) for state in self.states))
                if self.stalled is None:
                    await asyncio.sleep(self.interval)
        self.log.error("engine stalled", reason=self.stalled)
        return Verdict(self.stalled, STALLED.number, EngineStop.STALLED)

    async def check(self, session: ClientSession, state: SourceState) -> None:
        tokens = await self._read(session, state)
        now = self.clock()
        if state.progress_at is None or (tokens is not None and tokens != state.tokens):
            state.progress_at = now  # the first look starts the clock: start-up just ended
            state.tokens = tokens if tokens is not None else state.tokens
            return
        still = now - state.progress_at
        if still < self.watch.stall_seconds or self.stalled is not None:
            return
        ok, detail = await self._canary(session, state)
        state.canary = detail
        state.canaries["ok" if ok else "failed"] += 1
        if ok:
            state.progress_at = self.clock()
            self.log.debug("canary answered", source=state.source.name, detail=detail)
            return
        self.stalled_source = state.source.name
        self.stalled = STALLED.says(
            detail=f"{state.source.name} (:{state.source.port}) made no progress for "
            f"{self.clock() - state.progress_at:.0f} s ({' and '.join(self.watch.counters)} still; "
            f"/metrics: {state.read}) and its canary {detail}"
        )

    async def _read(self, session: ClientSession, state: SourceState) -> float | None:
        tokens, failed = await read_counters(
            session, "127.0.0.1", state.source.port, self.watch.counters, self.timeout
        )
        if failed is not None:
            state.read = failed
        else:
            state.read = "no token counters" if tokens is None else f"{tokens:.0f} tokens"
        return tokens

    async def _canary(self, session: ClientSession, state: SourceState) -> tuple[bool, str]:
        import aiohttp

        seconds = self.watch.canary_seconds
        body = {"model": self.watch.model, "prompt": CANARY_PROMPT, "max_tokens": 1, "temperature": 0}
        began = self.clock()
        try:
            async with session.post(
                f"http://127.0.0.1:{state.source.port}/v1/completions",
                json=body,
                headers={"User-Agent": CANARY_AGENT},
                timeout=aiohttp.ClientTimeout(total=seconds),
            ) as reply:
                text = await reply.text()
                status = reply.status
        except asyncio.TimeoutError:
            return False, f"timed out after {seconds:g} s"
        except aiohttp.ClientError as exc:
            return False, f"failed: {type(exc).__name__}: {exc}"
        took = self.clock() - began
        if status != 200:
            return False, f"failed: HTTP {status} {' '.join(text.split())[:200]}"
        return True, f"answered in {took:.2f} s"

    # -------------------------------------------------------------- the watcher protocol
    def not_live(self) -> str | None:
        return self.stalled

    def details(self) -> dict[str, Any]:
        now = self.clock()
        return {s.source.name: s.as_dict(now) for s in self.states}

    def metrics(self) -> Iterator[Metric]:
        progress, stalled = FORWARD_LAST_PROGRESS.family(), FORWARD_STALLED.family()
        canaries = FORWARD_CANARIES.family()
        now = self.clock()
        for state in self.states:
            name = [state.source.name]
            if state.progress_at is not None:
                progress.add_metric(name, wall_time(state.progress_at, now))
            stalled.add_metric(name, float(self.stalled_source == state.source.name))
            for outcome in ("ok", "failed"):
                canaries.add_metric([state.source.name, outcome], state.canaries[outcome])
        yield from (progress, stalled, canaries)
