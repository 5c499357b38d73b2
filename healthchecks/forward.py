"""Forward progress: does the serving engine still produce tokens? (the plan's ProgressWatch)

A hung GPU or TP peer, a blocked KV transfer or a deadlocked scheduler leaves the engine's process
running and its /health at 200 (vLLM 0.32 answers /health from the API server; with its engine core
SIGSTOPped every request hangs until VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, 300 s). What does change
while an engine works is its own token counters on /metrics. So, per API server:

- the counters moved since the last look: progress, nothing is sent (they are the pod's step
  signals, by its P/D role: the plan's StepWatch says which and why);
- requests are running or waiting (the plan's busy gauges): busy, no canary is sent (one queued
  behind them would time out and cut the user's request). Requests running and no step for the
  plan's StepWatch.seconds is a stall without a canary: the API server answers /metrics while its
  engine core hangs in a collective, and a long chunked prefill still moves a step signal;
- they stood still for `stall_seconds` and it is idle: one canary, the smallest request its runner
  serves, with the engine's own API key and its own deadline. Its answer says:
  - 200: the engine core worked, progress;
  - a timeout, no connection, or a 5xx: stall evidence. /livez turns 503 naming the server, and the
    verdict ends the pod, stopping the engine as a stalled one (EngineStop.STALLED);
  - anything else (401/403: a key; 404: a path or model; 400/422: the request's shape): the canary is
    wrong, and a new pod would be just as wrong. Logged once with the fix, counted, never a stall;
    the counters are still watched and the canary asked again a window later.

The key is the value of the canary's `api_key_env` in the engine's environment (engine_api_key); it
travels only in the request's Authorization header. No engine reply body reaches /livez, the verdict
or the metrics: only its status (a body may echo anything); the log line of a refusal carries an
excerpt, scrubbed like every log line. An idle engine costs one canary per `stall_seconds`. Watching
begins when start-up has ended and stops with the first stall.

Each API server is looked at once per check interval whatever it does: a /metrics read still in
flight when its tick ends goes on in the background (no second one starts), and the tick is judged
without it. The window's end is a tick of its own: an API server still (or its /metrics unanswered)
through the window is canaried then, not at the next tick nor one read timeout later, unless its
last answer said it was busy; the canary is still the judge. So a stall is told within
stall_seconds + canary_seconds (+ one interval when the window ends while a fresh read is out).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client.core import Metric

from healthchecks.canary import OUTCOMES, refusal_fix, send_canary
from healthchecks.engine_metrics import MetricsReader, Samples, SeriesKey, read_samples
from healthchecks.metrics import (
    FORWARD_CANARIES,
    FORWARD_LAST_PROGRESS,
    FORWARD_LAST_STEP,
    FORWARD_STALLED,
    wall_time,
)
from healthchecks.watcher import Watcher
from launcher.contract.exits import STALLED
from launcher.contract.log import Log
from launcher.contract.plan import ProgressSource, ProgressWatch
from launcher.contract.stop import EngineStop, Verdict

if TYPE_CHECKING:
    from aiohttp import ClientSession

SERIES_KEPT = 1024  # series remembered per API server: label churn cannot grow the launcher


@dataclass
class SourceState:
    source: ProgressSource
    # The counters' latest valid value per series (engine_metrics.Samples): a series moved when its
    # value differs from its own latest, however many reads it was missing in between.
    seen: dict[SeriesKey, float] = field(default_factory=dict)
    exposed: bool = False  # the engine ever exposed a sample of its counters (valid or not)
    unknown_since: float | None = None  # since when the answered reads hold no valid counter sample
    unknown_why: str = ""
    unknown_at: float = 0.0  # unix time it began, for /livez (a settled fact while it lasts)
    progress_at: float | None = None  # when they last moved, or a canary came back
    step_at: float | None = None  # when the engine last made a step, or last had none to make
    running: float | None = (
        0.0  # requests being stepped, as the latest answered /metrics said (None: unknown)
    )
    canaried_at: float | None = None  # when the latest canary came back, answered or refused
    read: str = "not read yet"  # the latest /metrics outcome
    busy: bool = False  # the latest answered /metrics said requests were running or waiting
    unanswered_since: float | None = None  # when the read still in flight at a tick's end began
    canary: str = "none sent"  # the latest canary's outcome
    canaries: Counter[str] = field(default_factory=Counter)  # by outcome: ok, failed, refused

    def as_dict(self, now: float, step_seconds: float | None) -> dict[str, Any]:
        since = None if self.progress_at is None else round(now - self.progress_at, 1)
        out = {
            "port": self.source.port,
            "seconds_since_progress": since,
            "metrics": self.metrics_outcome(now),
            "canary": self.canary,
        }
        if self.unknown_since is not None:
            out["signal_unknown"] = (
                f"{self.unknown_why} for {now - self.unknown_since:.1f} s: judged as still"
            )
        if step_seconds is not None:
            out["requests_running"] = self.running
            out["seconds_since_step"] = None if self.step_at is None else round(now - self.step_at, 1)
            out["step_seconds"] = step_seconds
        return out

    def metrics_outcome(self, now: float) -> str:
        if self.unanswered_since is None:
            return self.read
        return f"GET /metrics unanswered for {now - self.unanswered_since:.1f} s (before: {self.read})"


class ForwardWatcher(Watcher):
    name = "forward"

    def __init__(
        self,
        watch: ProgressWatch,
        started: Callable[[], bool],
        interval: float,
        timeout: float,
        log: Log,
        api_key: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        readers: Sequence[MetricsReader] = (),
    ) -> None:
        """started(): whether start-up has ended; timeout: for reading /metrics (the canary has its own);
        api_key: the engine's (healthchecks/canary.py engine_api_key), sent as a Bearer token; readers:
        other uses of the same /metrics reads (the KV-transfer relay)."""
        self.watch, self.readers = watch, tuple(readers)
        self.states = [SourceState(s) for s in watch.sources]
        self.started, self.interval, self.timeout = started, interval, timeout
        self.log, self.clock = log, clock
        self._api_key = api_key
        self.stalled: str | None = None  # the verdict, once given
        self.stalled_source: str | None = None  # the API server it is about
        self.told: set[int] = set()  # the refusals already logged, by status

    async def run(self) -> Verdict:
        """Until a stall (its verdict) or the task is cancelled."""
        import aiohttp

        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            watches = [asyncio.ensure_future(self._watch_source(session, state)) for state in self.states]
            try:
                done, _ = await asyncio.wait(watches, return_when=asyncio.FIRST_COMPLETED)
                for watch in done:
                    watch.result()  # re-raises what ended it
            finally:
                await _cancel(watches)
        assert self.stalled is not None
        self.log.error("engine stalled", reason=self.stalled)
        return Verdict(self.stalled, STALLED.number, EngineStop.STALLED)

    async def _watch_source(self, session: ClientSession, state: SourceState) -> None:
        """One API server, one tick per interval until a stall; the stall window's end is a tick of
        its own. A tick waits for its /metrics read until the tick or the window ends, no longer: a
        read still in flight then goes on (a stopped API server holds it until its timeout), the
        tick is judged without counters, and the next tick waits for the same read. Only a canary
        holds the ticks: its answer is the judgement."""
        loop = asyncio.get_running_loop()
        reading: asyncio.Future[Samples | None] | None = None
        began = 0.0
        try:
            while True:
                tick_ends = loop.time() + self.interval
                if self.started():
                    if reading is None:
                        reading, began = asyncio.ensure_future(self._read(session, state)), self.clock()
                    await asyncio.wait({reading}, timeout=self._until_due(state, self.interval))
                    tokens = None
                    if reading.done():
                        tokens, reading, state.unanswered_since = reading.result(), None, None
                    else:
                        state.unanswered_since = began
                    await self.check(session, state, tokens)
                    if self.stalled is not None:
                        return
                await asyncio.sleep(self._until_due(state, tick_ends - loop.time()))
        finally:
            if reading is not None:
                await _cancel([reading])

    def _until_due(self, state: SourceState, rest: float) -> float:
        """`rest` seconds, or fewer when the API server's stall window ends sooner: the canary is due
        when the window ends, not at the first tick after it."""
        rest = max(0.0, rest)
        if state.progress_at is None:
            return rest
        left = self._window_began(state) + self.watch.stall_seconds - self.clock()
        return min(rest, left) if left > 0 else rest

    @staticmethod
    def _window_began(state: SourceState) -> float:
        assert state.progress_at is not None
        return max(state.progress_at, state.canaried_at or state.progress_at)

    async def check(self, session: ClientSession, state: SourceState, tokens: Samples | None) -> None:
        """One tick's judgement; tokens: the counters read this tick (None: no answer, not yet or not
        at all). Progress is any series stepping; a series missing or not a count is unknown, never
        movement, and unknown counters are judged as still ones."""
        now = self.clock()
        moved = tokens is not None and self._moved(state, tokens)
        if state.progress_at is None or moved:
            state.progress_at = state.step_at = now  # the first look starts the clock: start-up just ended
            return
        if self.stalled is not None:
            return
        if self._judge_steps(state, now):
            return
        if now - self._window_began(state) < self.watch.stall_seconds or state.busy:
            return
        base = f"http://127.0.0.1:{state.source.port}"
        answer = await send_canary(session, base, self.watch, self._api_key, clock=self.clock)
        state.canary, state.canaried_at = answer.detail, self.clock()
        state.canaries[answer.outcome] += 1
        if answer.outcome == "ok":
            state.progress_at = state.canaried_at
            self.log.debug("canary answered", source=state.source.name, detail=answer.detail)
        elif answer.outcome == "refused":
            assert answer.status is not None
            self._tell(state, answer.status, answer.excerpt)
        else:
            self.stalled_source = state.source.name
            self.stalled = STALLED.says(
                detail=f"{state.source.name} (:{state.source.port}) made no progress for "
                f"{self.clock() - state.progress_at:.0f} s ({' and '.join(self.watch.counters)} still; "
                f"/metrics: {state.metrics_outcome(now)}) and its canary {answer.detail}"
            )
            if answer.excerpt:
                self.log.warning("canary failed", source=state.source.name, answer=answer.excerpt)

    @staticmethod
    def _moved(state: SourceState, tokens: Samples) -> bool:
        """Any valid series differs from its own latest valid value; remembers this read's."""
        moved = any(key in state.seen and value != state.seen[key] for key, value in tokens.valid.items())
        if len(state.seen) + len(tokens.valid) > SERIES_KEPT:
            state.seen.clear()
        state.seen.update(tokens.valid)
        return moved

    def _judge_steps(self, state: SourceState, now: float) -> bool:
        """A busy engine judged by its steps: requests running (as the latest answer said) and no step
        for the bound is a stall; nothing running restarts the clock (there is no step to make). True
        when the verdict is given."""
        steps = self.watch.steps
        if steps is None or state.step_at is None or not state.exposed:  # no step signal to judge by
            return False
        if not (state.running or (state.running is None and state.busy)):  # unknown while busy: held
            state.step_at = now
            return False
        still = now - state.step_at
        if still < steps.seconds:
            return False
        self.stalled_source = state.source.name
        self.stalled = STALLED.says(
            detail=f"{state.source.name} (:{state.source.port}) has {_count(state.running)} request(s) "
            f"running and made no engine step for {still:.0f} s, over the bound of {steps.seconds:g} s "
            f"(LLMD_STEP_SECONDS; {' / '.join(self.watch.counters)} still; /metrics: "
            f"{state.metrics_outcome(now)})"
        )
        return True

    def _tell(self, state: SourceState, status: int, excerpt: str) -> None:
        """Once per status: the canary is wrong, what fixes it. Never a stall."""
        if status in self.told:
            return
        self.told.add(status)
        fix = refusal_fix(status, self.watch.canary, self._api_key is not None)
        self.log.warning(
            f"canary refused with HTTP {status}, not a stall (told once): {fix}",
            source=state.source.name,
            answer=excerpt,
        )

    async def _read(self, session: ClientSession, state: SourceState) -> Samples | None:
        """The counters' samples (None: not read); notes in the state whether requests are running or
        waiting (a read that failed says no; samples that are no count say nothing), how many run,
        and since when the counters are unknown; hands the readers their sums."""
        watch = self.watch
        running = watch.steps.running if watch.steps is not None else ()
        relayed = tuple((s,) for reader in self.readers for s in reader.selectors)
        groups = (watch.busy, running, watch.counters, *relayed)
        samples, failed = await read_samples(session, "127.0.0.1", state.source.port, groups, self.timeout)
        (busy, in_step, tokens), rest = samples[:3], [s.total for s in samples[3:]]
        requests = busy.total
        state.busy = requests is not None and requests > 0
        if failed is not None:
            state.read = failed
            self._unknown(state, "no answer")
            return None
        if running:  # not exposed at all: none running (as before #40); exposed and no count: unknown
            state.running = in_step.total if in_step.valid else (None if in_step.invalid else 0.0)
        for reader in self.readers:
            taken, rest = rest[: len(reader.selectors)], rest[len(reader.selectors) :]
            reader.take(state.source.name, tuple(taken))
        state.exposed = state.exposed or tokens.exposed
        if tokens.valid or not tokens.exposed:
            state.unknown_since = None
        else:
            self._unknown(state, "no counter sample is a count (NaN, ±Inf or negative)")
        state.read = f"{tokens.total:.0f} tokens" if tokens.valid else "no token counters"
        if tokens.invalid:
            state.read += f", {tokens.invalid} sample(s) no count"
        if state.busy:
            state.read += f", {requests:g} requests running or waiting"
        return tokens

    def _unknown(self, state: SourceState, why: str) -> None:
        if state.unknown_since is None:
            state.unknown_since, state.unknown_why, state.unknown_at = self.clock(), why, time.time()

    # -------------------------------------------------------------- the watcher protocol
    def not_live(self) -> str | None:
        return self.stalled

    def live_facts(self) -> dict[str, Any]:
        """The busy bound, so /livez says how long a hang with requests in flight may last; the API
        servers whose counters are unknown, since when (unix time) and why: judged as still ones."""
        facts: dict[str, Any] = {} if self.watch.steps is None else {"step_seconds": self.watch.steps.seconds}
        unknown = {
            s.source.name: {"since": round(s.unknown_at, 3), "why": s.unknown_why, "judged": "as still"}
            for s in self.states
            if s.unknown_since is not None
        }
        return {**facts, "signal_unknown": unknown} if unknown else facts

    def details(self) -> dict[str, Any]:
        now = self.clock()
        bound = self.watch.steps.seconds if self.watch.steps is not None else None
        return {s.source.name: s.as_dict(now, bound) for s in self.states}

    def metrics(self) -> Iterator[Metric]:
        progress, stalled = FORWARD_LAST_PROGRESS.family(), FORWARD_STALLED.family()
        canaries, step = FORWARD_CANARIES.family(), FORWARD_LAST_STEP.family()
        now = self.clock()
        for state in self.states:
            name = [state.source.name]
            if state.progress_at is not None:
                progress.add_metric(name, wall_time(state.progress_at, now))
            if state.step_at is not None and self.watch.steps is not None:
                step.add_metric(name, wall_time(state.step_at, now))
            stalled.add_metric(name, float(self.stalled_source == state.source.name))
            for outcome in OUTCOMES:
                canaries.add_metric([state.source.name, outcome], state.canaries[outcome])
        yield from (progress, step, stalled, canaries)
        for reader in self.readers:
            yield from reader.metrics()


def _count(running: float | None) -> str:
    return "an unknown number of" if running is None else f"{running:g}"


async def _cancel(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel the tasks and wait until they have ended (whatever they raised)."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
