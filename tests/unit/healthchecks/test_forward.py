"""ForwardWatcher against a fake engine API on loopback (in this process): moving token counters are
progress and send nothing; still counters get one canary, whose answer is progress and whose timeout
or error is a stall naming the server; the verdict shows on /livez."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from healthchecks.engine_metrics import counter_sum
from healthchecks.forward import ForwardWatcher
from healthchecks.state import PodHealth
from launcher.contract.plan import Check, Probes, ProgressSource, ProgressWatch
from launcher.contract.stop import RUNNING
from tests.ports import free_port
from tests.unit.healthchecks.loopback import QuietLog, completion_canary, serve_engine

COUNTERS = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total")


@dataclass
class FakeEngine:
    tokens: float = 0.0
    busy: bool = False  # counters advance on every scrape, as under load
    hang: bool = False  # completions never return, as with a stopped engine core
    status: int = 200
    canaries: list[dict[str, Any]] = field(default_factory=list)

    async def metrics(self, _request: web.Request) -> web.Response:
        if self.busy:
            self.tokens += 7
        text = (
            "# TYPE vllm:generation_tokens_total counter\n"
            f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {self.tokens}\n'
            f'vllm:prompt_tokens_total{{engine="0",model_name="m"}} {2 * self.tokens}\n'
            "vllm:generation_tokens_created 1.7e9\n"
        )
        return web.Response(text=text)

    async def completions(self, request: web.Request) -> web.Response:
        self.canaries.append(await request.json())
        if self.hang:
            await asyncio.sleep(1.0)  # well past the canary's deadline; short so the server stops soon
        self.tokens += 1
        return web.json_response({"choices": [{"text": "!"}]}, status=self.status)


def _watch(port: int, stall: float = 0.3, canary: float = 0.3) -> ProgressWatch:
    return ProgressWatch((ProgressSource("rank 3", port),), COUNTERS, completion_canary(), stall, canary)


def _run(engine: FakeEngine, seconds: float, port: int | None = None, **kw: float) -> tuple[list[str], float]:
    """Watch for `seconds` (or until a stall): the verdicts and when the first came."""

    async def scenario() -> tuple[list[str], float]:
        real = free_port()
        runner = await serve_engine(engine, real)
        verdicts: list[str] = []
        watcher = ForwardWatcher(_watch(port or real, **kw), lambda: True, 0.05, 0.5, QuietLog())
        began = asyncio.get_running_loop().time()
        task = asyncio.create_task(watcher.run())
        await asyncio.wait({task}, timeout=seconds)
        took = asyncio.get_running_loop().time() - began
        if task.done():
            verdicts.append(task.result().reason)
        task.cancel()
        await runner.cleanup()
        return verdicts, took

    return asyncio.run(scenario())


class NoProcesses:
    stop = RUNNING
    processes: tuple[Any, ...] = ()

    def process(self, _name: str) -> None:
        return None


def test_token_sum_adds_every_label_set_of_the_counters_only() -> None:
    text = (
        'vllm:generation_tokens_total{engine="0"} 5.0\nvllm:generation_tokens_total{engine="1"} 2\n'
        "vllm:generation_tokens_created 99\nvllm:prompt_tokens_total 10\n# vllm:prompt_tokens_total 1\n"
    )
    assert counter_sum(text, COUNTERS) == 17.0
    assert counter_sum("vllm:num_requests_running 0\n", COUNTERS) is None


def test_a_busy_engine_is_never_canaried() -> None:
    engine = FakeEngine(busy=True)
    verdicts, _ = _run(engine, 1.2)
    assert verdicts == [] and engine.canaries == []


def test_an_idle_engine_gets_one_small_canary_per_window_and_is_not_stalled() -> None:
    engine = FakeEngine()
    verdicts, _ = _run(engine, 1.2, stall=0.4)
    assert verdicts == []
    assert 1 <= len(engine.canaries) <= 3  # about one per 0.4 s window over 1.2 s
    assert engine.canaries[0] == {"model": "tiny", "prompt": "Hi", "max_tokens": 1, "temperature": 0}


def test_a_hung_engine_is_stalled_within_stall_plus_canary_plus_an_interval() -> None:
    engine = FakeEngine(hang=True)
    verdicts, took = _run(engine, 5, stall=0.3, canary=0.3)
    assert len(verdicts) == 1 and len(engine.canaries) == 1
    assert verdicts[0].startswith("engine stalled: rank 3 (:")
    assert "made no progress for 1 s" in verdicts[0] or "made no progress for 0 s" in verdicts[0]
    assert "its canary timed out after 0.3 s" in verdicts[0]
    assert took < 0.3 + 0.3 + 0.05 + 0.5  # one interval, and scheduling slack


def test_a_canary_refused_with_an_error_status_is_a_stall() -> None:
    verdicts, _ = _run(FakeEngine(status=500), 5)
    assert len(verdicts) == 1 and "its canary failed: HTTP 500" in verdicts[0]


def test_an_api_server_that_stops_answering_is_a_stall() -> None:
    verdicts, _ = _run(FakeEngine(), 5, port=free_port())  # nothing listens there
    assert len(verdicts) == 1 and "Connect" in verdicts[0] and "/metrics: GET /metrics" in verdicts[0]


def test_nothing_is_judged_before_start_up_ended() -> None:
    async def scenario() -> list[str]:
        verdicts: list[str] = []
        watcher = ForwardWatcher(_watch(free_port()), lambda: False, 0.05, 0.5, QuietLog())
        task = asyncio.create_task(watcher.run())
        await asyncio.sleep(1)
        if task.done():
            verdicts.append(task.result().reason)
        task.cancel()
        return verdicts

    assert asyncio.run(scenario()) == []


def test_livez_tells_the_stall_with_the_rank_and_the_canarys_outcome() -> None:
    health = PodHealth(Probes(8090, ready=(), started=Check("engine", "engine")))
    health.attach(NoProcesses())
    watcher = ForwardWatcher(_watch(8000), lambda: True, 1, 1, QuietLog())
    health.watchers = (watcher,)
    live, body = health.liveness()
    assert live and body == {"live": True, "phase": "starting processes"}
    watcher.stalled = "engine stalled: rank 3 (:8000) made no progress for 61 s and its canary timed out"
    live, body = health.liveness()
    assert not live and body["reason"].startswith("engine stalled: rank 3")


def test_a_selector_sums_only_the_samples_holding_its_labels() -> None:
    # SGLang 0.5.23 realtime_tokens_total: one counter, a mode label per kind of step (#32)
    text = (
        'sglang:realtime_tokens_total{model_name="m",mode="decode"} 5.0\n'
        'sglang:realtime_tokens_total{model_name="m",mode="prefill_compute"} 512.0\n'
        'sglang:realtime_tokens_total{model_name="m",mode="prefill_cache"} 64.0\n'
    )
    decode = ('sglang:realtime_tokens_total{mode="decode"}',)
    assert counter_sum(text, decode) == 5.0
    prefill = (
        'sglang:realtime_tokens_total{mode="prefill_compute"}',
        'sglang:realtime_tokens_total{mode="prefill_cache"}',
    )
    assert counter_sum(text, prefill) == 576.0
    assert counter_sum(text, ("sglang:realtime_tokens_total",)) == 581.0
    assert counter_sum(text, ('sglang:realtime_tokens_total{mode="nothing"}',)) is None


def test_livez_states_the_busy_bound_while_live() -> None:
    """#32: the bound a hang with requests in flight may last is stated in /livez, not only in the plan."""
    from dataclasses import replace

    from launcher.contract.plan import StepWatch

    health = PodHealth(Probes(8090, ready=(), started=Check("engine", "engine")))
    health.attach(NoProcesses())
    steps = StepWatch(COUNTERS, ("vllm:num_requests_running",), 180.0, "where")
    health.watchers = (ForwardWatcher(replace(_watch(8000), steps=steps), lambda: True, 1, 1, QuietLog()),)
    assert health.liveness() == (True, {"live": True, "phase": "starting processes", "step_seconds": 180.0})


@dataclass
class SteppingEngine(FakeEngine):
    """vLLM's /metrics with the running gauge: `running` requests, `stepping` moves the KV usage."""

    running: int = 0
    usage: float = 0.0
    stepping: bool = False

    async def metrics(self, _request: web.Request) -> web.Response:
        if self.stepping:
            self.usage += 0.01
        text = (
            f'vllm:generation_tokens_total{{engine="0"}} {self.tokens}\n'
            f'vllm:num_requests_running{{engine="0"}} {self.running}\n'
            f'vllm:kv_cache_usage_perc{{engine="0"}} {self.usage}\n'
        )
        return web.Response(text=text)


def _stepped(
    engine: SteppingEngine, switch_after: float, running: int, seconds: float
) -> tuple[list[str], float]:
    """Watch with a 0.5 s step bound (no canary: a long stall window); after `switch_after` s the engine
    has `running` requests and stops stepping. The verdicts, and when the first came after the switch."""
    from dataclasses import replace

    from launcher.contract.plan import StepWatch

    signals = ("vllm:generation_tokens_total", "vllm:kv_cache_usage_perc")
    steps = StepWatch(signals, ("vllm:num_requests_running",), 0.5, "where")

    async def scenario() -> tuple[list[str], float]:
        port = free_port()
        runner = await serve_engine(engine, port)
        watch = replace(_watch(port, stall=60), counters=signals, steps=steps)
        watcher = ForwardWatcher(watch, lambda: True, 0.05, 0.5, QuietLog())
        task = asyncio.create_task(watcher.run())
        await asyncio.sleep(switch_after)
        engine.running, engine.stepping = running, False
        switched = asyncio.get_running_loop().time()
        await asyncio.wait({task}, timeout=seconds)
        took = asyncio.get_running_loop().time() - switched
        verdicts = [task.result().reason] if task.done() else []
        task.cancel()
        await runner.cleanup()
        return verdicts, took

    return asyncio.run(scenario())


def test_a_request_that_hangs_after_a_long_idle_gets_the_whole_bound() -> None:
    """Idle time is no step missed: the clock restarts while nothing runs (#32)."""
    verdicts, took = _stepped(
        SteppingEngine(), switch_after=1.5, running=2, seconds=15
    )  # ends at the verdict
    assert len(verdicts) == 1 and " has 2 request(s) running and made no engine step for " in verdicts[0]
    assert took >= 0.45, took


def test_requests_running_while_the_steps_move_are_never_a_stall() -> None:
    engine = SteppingEngine(running=3, stepping=True)
    verdicts, _ = _stepped(engine, switch_after=1.5, running=3, seconds=0)  # steps moved throughout
    assert verdicts == []
