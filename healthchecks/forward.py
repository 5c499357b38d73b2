"""Forward progress: does the serving engine still produce tokens? (the plan's ProgressWatch)

A hung GPU or TP peer, a blocked KV transfer or a deadlocked scheduler leaves the engine's process
running and its /health at 200 (vLLM 0.32 answers /health from the API server; with its engine core
SIGSTOPped every request hangs until VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, 300 s). What does change
while an engine works is its own token counters on /metrics. So, per API server:

- the counters moved since the last look: progress, nothing is sent;
- they stood still for `stall_seconds` (an idle engine, or a stuck one): one canary, the smallest real
  request (POST /v1/completions, max_tokens 1), with its own deadline. It comes back: progress. It
  fails or times out: the engine is stalled, /livez turns 503 naming the server, and `on_stalled`
  ends the pod.

A busy engine is never canaried; an idle one costs one token per `stall_seconds`. Watching begins when
start-up has ended and stops with the first stall.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from launcher.contract.exits import STALLED
from launcher.contract.log import Log
from launcher.contract.plan import ProgressSource, ProgressWatch

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


def token_sum(text: str, counters: tuple[str, ...]) -> float | None:
    """The sum of the counters' samples over all their label sets; None when none is exposed."""
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith(counters) and line.split("{", 1)[0].split(" ", 1)[0] in counters:
            try:
                total += float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
            found = True
    return total if found else None


class ForwardWatcher:
    def __init__(
        self,
        watch: ProgressWatch,
        started: Callable[[], bool],
        interval: float,
        timeout: float,
        on_stalled: Callable[[str], None],
        log: Log,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """started(): whether start-up has ended; timeout: for reading /metrics (the canary has its own)."""
        self.watch = watch
        self.states = [SourceState(s) for s in watch.sources]
        self.started, self.interval, self.timeout = started, interval, timeout
        self.on_stalled, self.log, self.clock = on_stalled, log, clock
        self.stalled: str | None = None  # the verdict, once given
        self.stalled_source: str | None = None  # the API server it is about

    async def run(self) -> None:
        """Until a stall (then `on_stalled` is called once) or the task is cancelled."""
        import aiohttp

        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            while self.stalled is None:
                if self.started():
                    await asyncio.gather(*(self.check(session, state) for state in self.states))
                if self.stalled is None:
                    await asyncio.sleep(self.interval)
        self.log.error("engine stalled", reason=self.stalled)
        self.on_stalled(self.stalled)

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
        import aiohttp

        try:
            async with session.get(
                f"http://127.0.0.1:{state.source.port}/metrics",
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            ) as reply:
                if reply.status != 200:
                    state.read = f"GET /metrics {reply.status}"
                    return None
                text = await reply.text()
        except asyncio.TimeoutError:
            state.read = f"GET /metrics: no answer within {self.timeout:g} s"
            return None
        except aiohttp.ClientError as exc:
            state.read = f"GET /metrics: {type(exc).__name__}: {exc}"
            return None
        tokens = token_sum(text, self.watch.counters)
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

    def as_dict(self) -> dict[str, Any]:
        now = self.clock()
        return {s.source.name: s.as_dict(now) for s in self.states}
