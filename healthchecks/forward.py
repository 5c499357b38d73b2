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
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from prometheus_client.core import Metric

from healthchecks.engine_metrics import read_sums
from healthchecks.metrics import (
    ENGINE_KV_TRANSFER,
    FORWARD_CANARIES,
    FORWARD_LAST_PROGRESS,
    FORWARD_LAST_STEP,
    FORWARD_STALLED,
    PD_CANARIES,
    wall_time,
)
from healthchecks.watcher import Watcher
from launcher.contract.exits import STALLED
from launcher.contract.log import Log
from launcher.contract.plan import Canary, ProgressSource, ProgressWatch
from launcher.contract.redact import REDACTED
from launcher.contract.stop import EngineStop, Verdict

if TYPE_CHECKING:
    from aiohttp import ClientSession

CANARY_AGENT = "llm-d-launcher-canary"  # so the engine's access log says who sent it
# The router's choice of prefill pod, which the disagg sidecar reads (llm-d/llm-d-router
# pkg/sidecar/proxy/proxy.go requestHeaderPrefillHostPort).
PREFILLER_HEADER = "x-prefiller-host-port"
Outcome = Literal["ok", "failed", "refused"]
Counts = tuple[float | None, ...]  # one value per sample selector (None: not exposed)
OUTCOMES: tuple[Outcome, ...] = ("ok", "failed", "refused")


def engine_api_key(canary: Canary, engine_env: Mapping[str, str]) -> str | None:
    """The key the engine enforces, as its own environment gives it (the plan's env over the
    launcher's, which it inherits); None when the engine reads none from there."""
    if canary.api_key_env is None:
        return None
    return engine_env.get(canary.api_key_env) or None


def judge(status: int) -> Outcome:
    """200: the engine core worked. 5xx: it failed, stall evidence. Any other status is the API
    server refusing the canary itself (its key, path, model or shape): not the engine's progress."""
    if status == 200:
        return "ok"
    return "failed" if status >= 500 else "refused"


def refusal_fix(status: int, canary: Canary, key_sent: bool) -> str:
    """Why the canary was refused, and what makes it right; said once in the log."""
    if status in (401, 403):
        if canary.api_key_env is None:
            why = "the engine enforces an API key the launcher cannot send"
        elif key_sent:
            why = f"the engine refused the key in {canary.api_key_env}"
        else:
            why = "the engine enforces an API key the launcher cannot see"
        return f"{why}: {canary.key_fix}"
    if status == 404:
        return (
            f"the engine serves no POST {canary.path} for model {canary.body.get('model')}: {canary.path_fix}"
        )
    if status in (400, 422):
        return (
            f"the engine refused the canary's request shape (POST {canary.path}): set LLMD_STALL_SECONDS=0 "
            "to send none, and report the engine's answer"
        )
    return f"HTTP {status} proves neither progress nor a stall; the canary is asked again a window later"


@dataclass(frozen=True)
class CanaryAnswer:
    outcome: Outcome
    detail: str  # for /livez and the verdict: the status or the failure, never a body
    status: int | None = None
    excerpt: str = ""  # the head of the reply's body, for the log only


@dataclass
class SourceState:
    source: ProgressSource
    tokens: Counts | None = None  # the counters at the last look (None: not read yet)
    progress_at: float | None = None  # when they last moved, or a canary came back
    step_at: float | None = None  # when the engine last made a step, or last had none to make
    running: float | None = None  # requests being stepped, as the latest answered /metrics said
    transfer: Counts = ()  # the connector's KV-transfer counters, as the latest answered /metrics said
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
        pool: str = "",
    ) -> None:
        """started(): whether start-up has ended; timeout: for reading /metrics (the canary has its own);
        api_key: engine_api_key's answer, sent as a Bearer token; pool: the pod's, a label of the
        relayed KV-transfer counters."""
        self.watch, self.pool = watch, pool
        self.states = [SourceState(s) for s in watch.sources]
        self.started, self.interval, self.timeout = started, interval, timeout
        self.log, self.clock = log, clock
        self._api_key = api_key
        self.stalled: str | None = None  # the verdict, once given
        self.stalled_source: str | None = None  # the API server it is about
        self.told: set[int] = set()  # the refusals already logged, by status
        self.pd_canary = "none sent"  # the latest P/D canary's outcome (plan's pd_canary)
        self.pd_canaries: Counter[str] = Counter()  # by outcome: ok, failed, refused
        self._pd_outcome: Outcome | None = None  # logged when it changes

    async def run(self) -> Verdict:
        """Until a stall (its verdict) or the task is cancelled."""
        import aiohttp

        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            watches = [asyncio.ensure_future(self._watch_source(session, state)) for state in self.states]
            if self.watch.pd_canary is not None:
                watches.append(asyncio.ensure_future(self._pd_canaries(session)))
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
        reading: asyncio.Future[Counts | None] | None = None
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

    async def check(self, session: ClientSession, state: SourceState, tokens: Counts | None) -> None:
        """One tick's judgement; tokens: the counters read this tick (None: no answer, not yet or not
        at all)."""
        now = self.clock()
        moved = tokens is not None and any(v is not None for v in tokens) and tokens != state.tokens
        if state.progress_at is None or moved:
            state.progress_at = state.step_at = now  # the first look starts the clock: start-up just ended
            state.tokens = tokens if tokens is not None else state.tokens
            return
        if self.stalled is not None:
            return
        if self._judge_steps(state, now):
            return
        if now - self._window_began(state) < self.watch.stall_seconds or state.busy:
            return
        answer = await self._canary(session, f"http://127.0.0.1:{state.source.port}")
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

    def _judge_steps(self, state: SourceState, now: float) -> bool:
        """A busy engine judged by its steps: requests running (as the latest answer said) and no step
        for the bound is a stall; nothing running restarts the clock (there is no step to make). True
        when the verdict is given."""
        steps = self.watch.steps
        if steps is None or state.step_at is None or state.tokens is None:
            return False
        if not any(v is not None for v in state.tokens):  # the engine exposes no step signal
            return False
        if not state.running:
            state.step_at = now
            return False
        still = now - state.step_at
        if still < steps.seconds:
            return False
        self.stalled_source = state.source.name
        self.stalled = STALLED.says(
            detail=f"{state.source.name} (:{state.source.port}) has {state.running:g} request(s) running and "
            f"made no engine step for {still:.0f} s, over the bound of {steps.seconds:g} s "
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

    async def _read(self, session: ClientSession, state: SourceState) -> Counts | None:
        """The counters (None: not read); notes in the state whether requests are running or waiting
        (a read that failed says no), how many run, and the connector's KV-transfer counters."""
        watch = self.watch
        running = watch.steps.running if watch.steps is not None else ()
        groups = (
            (watch.busy, running),
            tuple((c,) for c in watch.counters),
            tuple((c,) for c in watch.kv_transfer),
        )
        sums, failed = await read_sums(
            session, "127.0.0.1", state.source.port, tuple(g for part in groups for g in part), self.timeout
        )
        requests, in_step, tokens = sums[0], sums[1], sums[2 : 2 + len(watch.counters)]
        state.busy = requests is not None and requests > 0
        if failed is not None:
            state.read = failed
            return None
        if running:
            state.running = in_step or 0.0
        state.transfer = sums[2 + len(watch.counters) :]
        exposed = [v for v in tokens if v is not None]
        state.read = f"{sum(exposed):.0f} tokens" if exposed else "no token counters"
        if state.busy:
            state.read += f", {requests:g} requests running or waiting"
        return tokens

    async def _pd_canaries(self, session: ClientSession) -> None:
        """The canary through the disagg sidecar, asking it for the two-step path with the planned
        prefill endpoint: every stall_seconds once start-up has ended. Counted, shown in /livez and
        logged when its outcome changes; never a verdict (a failure is as often the peer's)."""
        pd = self.watch.pd_canary
        assert pd is not None
        base = f"{'https' if pd.tls else 'http'}://127.0.0.1:{pd.port}"
        while not self.started():
            await asyncio.sleep(self.interval)
        while True:
            # One window after start-up first: the sidecar, started beside the engine, may still be
            # coming up (a TLS one makes its certificate) when the engine answers.
            await asyncio.sleep(self.watch.stall_seconds)
            if self.started():
                answer = await self._canary(session, base, {PREFILLER_HEADER: pd.prefiller}, tls=pd.tls)
                if answer.outcome != self._pd_outcome:
                    log = self.log.info if answer.outcome == "ok" else self.log.warning
                    log(
                        f"P/D canary {answer.detail} (never a verdict)",
                        prefiller=pd.prefiller,
                        answer=answer.excerpt,
                    )
                self.pd_canary, self._pd_outcome = answer.detail, answer.outcome
                self.pd_canaries[answer.outcome] += 1

    async def _canary(
        self, session: ClientSession, base: str, extra: Mapping[str, str] | None = None, tls: bool = False
    ) -> CanaryAnswer:
        """The canary POSTed to base (scheme://host:port); tls: to the pod's own sidecar, whose
        certificate (self-signed unless it was given one) is not verified."""
        import aiohttp

        seconds, canary = self.watch.canary_seconds, self.watch.canary
        headers = {"User-Agent": CANARY_AGENT, **(extra or {})}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        began = self.clock()
        try:
            async with session.post(
                f"{base}{canary.path}",
                json=dict(canary.body),
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=seconds),
                ssl=not tls,
            ) as reply:
                body = await reply.read()
                status = reply.status
        except asyncio.TimeoutError:
            return CanaryAnswer("failed", f"timed out after {seconds:g} s")
        except aiohttp.ClientError as exc:
            return CanaryAnswer("failed", f"failed: {type(exc).__name__}: {exc}")
        outcome = judge(status)
        if outcome == "ok":
            return CanaryAnswer(outcome, f"answered in {self.clock() - began:.2f} s", status)
        excerpt = " ".join(body.decode("utf-8", errors="replace").split())[:200]
        if self._api_key is not None:  # an answer may echo the request's header
            excerpt = excerpt.replace(self._api_key, REDACTED)
        verb = "failed" if outcome == "failed" else "refused"
        return CanaryAnswer(outcome, f"{verb}: HTTP {status}", status, excerpt)

    # -------------------------------------------------------------- the watcher protocol
    def not_live(self) -> str | None:
        return self.stalled

    def live_facts(self) -> dict[str, Any]:
        """The busy bound, so /livez says how long a hang with requests in flight may last; the P/D
        canary's latest outcome and counts, so a broken two-step path shows on a pod that stays live."""
        facts: dict[str, Any] = {} if self.watch.steps is None else {"step_seconds": self.watch.steps.seconds}
        if (pd := self.watch.pd_canary) is not None:
            facts["pd_canary"] = {
                "prefiller": pd.prefiller,
                "latest": self.pd_canary,
                "counts": {o: self.pd_canaries[o] for o in OUTCOMES},
                "verdict": "never: a failure is as often the prefill peer's",
            }
        return facts

    def details(self) -> dict[str, Any]:
        now = self.clock()
        bound = self.watch.steps.seconds if self.watch.steps is not None else None
        return {s.source.name: s.as_dict(now, bound) for s in self.states}

    def metrics(self) -> Iterator[Metric]:
        progress, stalled = FORWARD_LAST_PROGRESS.family(), FORWARD_STALLED.family()
        canaries, step = FORWARD_CANARIES.family(), FORWARD_LAST_STEP.family()
        transfer, pd = ENGINE_KV_TRANSFER.family(), PD_CANARIES.family()
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
            for counter, value in zip(self.watch.kv_transfer, state.transfer, strict=False):
                if value is not None:
                    transfer.add_metric([state.source.name, self.pool, self.watch.role, counter], value)
        if self.watch.pd_canary is not None:
            for outcome in OUTCOMES:
                pd.add_metric([self.pool, self.watch.role, outcome], self.pd_canaries[outcome])
        yield from (progress, step, stalled, canaries, transfer, pd)


async def _cancel(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel the tasks and wait until they have ended (whatever they raised)."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
