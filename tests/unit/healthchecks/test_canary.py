"""The canary's answers, against a fake engine API on loopback (in this process), as issues #20 A and
#24 (items 2, 9, 12) ask: the engine's own key is sent and never shown; 200 is progress; 401, 403,
404, 400, 422 are a wrong canary (logged once with the fix, counted, never a stall); a 5xx, a timeout
or no connection is a stall; a busy engine (requests running or waiting) is never canaried; a
/metrics body that is not UTF-8 is "no token counters"; no reply body reaches /livez, the verdict or
the metrics, and every probe answer goes through the scrubber."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
from aiohttp import web
from prometheus_client import generate_latest

from healthchecks.canary import engine_api_key, judge
from healthchecks.forward import ForwardWatcher
from healthchecks.metrics import build_registry
from healthchecks.pod_watchers import build_watchers
from healthchecks.server import ProbeServer
from healthchecks.state import PodHealth
from healthchecks.watcher import Watcher
from launcher.contract.plan import Check, Plan, Probes, ProgressSource, ProgressWatch
from launcher.contract.redact import Scrubber
from launcher.contract.stop import RUNNING
from roles import build_plan
from tests.ports import free_port
from tests.unit.healthchecks.loopback import completion_canary, serve_engine
from tests.unit.healthchecks.test_watchers import KIMI, _prefill_leader

COUNTERS = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total")
BUSY = ("vllm:num_requests_running", "vllm:num_requests_waiting")
KEY = "sk-canary-0123456789abcdef"


@dataclass
class Engine:
    """vLLM's API as the canary meets it: /metrics, and /v1/completions behind an optional key."""

    key: str | None = None  # enforced as vLLM's AuthenticationMiddleware does (Bearer, 401)
    status: int = 200  # of a completion that got past the key
    body: str = '{"choices": [{"text": "!"}]}'
    running: float = 0.0
    waiting: float = 0.0
    metrics_body: bytes | None = None  # served as is instead of the counters
    canaries: list[dict[str, str]] = field(default_factory=list)  # each canary's headers

    async def metrics(self, _request: web.Request) -> web.Response:
        if self.metrics_body is not None:
            return web.Response(body=self.metrics_body, content_type="text/plain")
        return web.Response(
            text=f"vllm:generation_tokens_total 5\nvllm:prompt_tokens_total 9\n"
            f'vllm:num_requests_running{{engine="0"}} {self.running}\n'
            f'vllm:num_requests_waiting{{engine="0"}} {self.waiting}\n'
        )

    async def completions(self, request: web.Request) -> web.Response:
        self.canaries.append(dict(request.headers))
        if self.key is not None and request.headers.get("Authorization") != f"Bearer {self.key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return web.Response(text=self.body, status=self.status, content_type="application/json")


class Recorder:
    """A Log that keeps every line: (level, event, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, **fields: self.lines.append((level, event, fields))

    def warnings(self) -> list[str]:
        return [event for level, event, _ in self.lines if level == "warning"]

    def text(self) -> str:
        return json.dumps(self.lines)


class NoProcesses:
    stop = RUNNING
    processes: tuple[Any, ...] = ()

    def process(self, _name: str) -> None:
        return None


def _watcher(port: int, log: Recorder, api_key: str | None, stall: float = 0.2) -> ForwardWatcher:
    watch = ProgressWatch(
        (ProgressSource("engine", port),), COUNTERS, completion_canary(), stall, 0.5, busy=BUSY
    )
    return ForwardWatcher(watch, lambda: True, 0.05, 0.5, log, api_key)


def _watch(engine: Engine, seconds: float, api_key: str | None = None) -> tuple[ForwardWatcher, Recorder]:
    """Watch the engine for `seconds`: the watcher (a verdict in .stalled) and its log. A watch that
    raised fails the test here."""

    async def scenario() -> tuple[ForwardWatcher, Recorder]:
        port = free_port()
        runner = await serve_engine(engine, port)
        log = Recorder()
        watcher = _watcher(port, log, api_key)
        task = asyncio.create_task(watcher.run())
        try:
            await asyncio.wait({task}, timeout=seconds)
            if task.done():
                task.result()  # re-raises what killed the watch
            return watcher, log
        finally:
            task.cancel()
            await runner.cleanup()

    return asyncio.run(scenario())


def _exposition(watcher: Watcher) -> str:
    health = PodHealth(Probes(8090, ready=(), started=Check("engine", "engine")))
    health.watchers = (watcher,)
    return generate_latest(build_registry(health)[0]).decode()


def test_the_engines_key_is_sent_and_an_idle_engine_stays_live_across_windows() -> None:
    engine = Engine(key=KEY)
    watcher, log = _watch(engine, 1.5, api_key=KEY)  # 0.2 s windows: several canaries
    assert watcher.stalled is None and log.warnings() == []
    assert len(engine.canaries) >= 3
    assert {c["Authorization"] for c in engine.canaries} == {f"Bearer {KEY}"}
    assert watcher.states[0].canaries["ok"] == len(engine.canaries)


@pytest.mark.parametrize("status", [401, 403, 404, 400, 422])
def test_a_refused_canary_is_logged_once_counted_and_never_a_stall(status: int) -> None:
    engine = Engine(status=status, body='{"error": "no"}')
    watcher, log = _watch(engine, 1.2)
    assert watcher.stalled is None and watcher.not_live() is None
    assert len(engine.canaries) >= 2  # asked again each window
    refusals = [w for w in log.warnings() if w.startswith(f"canary refused with HTTP {status}, not a stall")]
    assert len(refusals) == 1, log.lines  # told once
    assert watcher.states[0].canaries["refused"] == len(engine.canaries)
    assert f'outcome="refused",source="engine"}} {float(len(engine.canaries))}' in _exposition(watcher)
    fix = {401: "KEY FIX", 403: "KEY FIX", 404: "PATH FIX", 400: "LLMD_STALL_SECONDS=0", 422: "LLMD_STALL_"}
    assert fix[status] in refusals[0]


def test_a_key_the_launcher_cannot_see_is_named_with_the_fix() -> None:
    _, log = _watch(Engine(key=KEY), 0.6)  # the engine has a key; the launcher's view has none
    assert log.warnings() == [
        "canary refused with HTTP 401, not a stall (told once): the engine enforces an API key the "
        "launcher cannot see: KEY FIX"
    ]
    _, log = _watch(Engine(key=KEY), 0.6, api_key="sk-another-key-0000")
    assert "the engine refused the key in VLLM_API_KEY: KEY FIX" in log.warnings()[0]


@pytest.mark.parametrize("status", [500, 503])
def test_a_5xx_is_a_stall(status: int) -> None:
    watcher, _ = _watch(Engine(status=status), 2)
    assert watcher.stalled is not None and f"its canary failed: HTTP {status}" in watcher.stalled


def test_the_key_is_in_no_log_line_livez_answer_or_metric() -> None:
    # A hostile engine that echoes the request's Authorization header in its refusal and its 5xx.
    for status in (403, 500):
        engine = Engine(status=status, body=f'{{"error": "bad header Bearer {KEY}"}}')
        watcher, log = _watch(engine, 1.0, api_key=KEY)
        assert {c["Authorization"] for c in engine.canaries} == {f"Bearer {KEY}"}
        health = PodHealth(Probes(8090, ready=(), started=Check("engine", "engine")))
        health.attach(NoProcesses())
        health.watchers = (watcher,)
        surfaces = [log.text(), json.dumps(health.liveness()[1]), _exposition(watcher), watcher.stalled or ""]
        assert "bad header" in log.text()  # the excerpt is logged, the key in it hidden
        assert not [s for s in surfaces if KEY in s]


def test_no_reply_body_reaches_livez_or_the_verdict() -> None:
    # #24 item 2: the canary's error body (up to 200 characters) was on /livez, unscrubbed.
    watcher, log = _watch(Engine(status=500, body="Traceback: secret-internal-detail"), 2)
    health = PodHealth(Probes(8090, ready=(), started=Check("engine", "engine")))
    health.attach(NoProcesses())
    health.watchers = (watcher,)
    live, body = health.liveness()
    assert not live and body["forward"]["engine"]["canary"] == "failed: HTTP 500"
    assert "secret-internal-detail" not in json.dumps(body) + (watcher.stalled or "")
    assert "secret-internal-detail" in log.text()  # people find it in the (scrubbed) log


def test_every_probe_answer_goes_through_the_scrubber() -> None:
    secret = "hf_probe_secret_value_123"
    health = PodHealth(Probes(8090, ready=(), started=Check("engine", "engine")))
    health.attach(NoProcesses())
    watcher = _watcher(8000, Recorder(), None)
    watcher.stalled = f"engine stalled: the engine said {secret}"
    watcher.states[0].canary = f"refused: {secret}"
    health.watchers = (watcher,)
    port = free_port()

    async def scenario() -> list[str]:
        server = ProbeServer(health, "127.0.0.1", port, lambda _: "x", Scrubber([secret]))
        await server.start()
        try:
            async with httpx.AsyncClient() as client:
                return [(await client.get(f"http://127.0.0.1:{port}/{e}")).text for e in ("livez", "metrics")]
        finally:
            await server.stop()

    livez, metrics = asyncio.run(scenario())
    assert "engine stalled: the engine said <redacted>" in livez and secret not in livez + metrics


@pytest.mark.parametrize(("running", "waiting"), [(1, 0), (0, 3)])
def test_a_busy_engine_with_still_counters_is_never_canaried(running: float, waiting: float) -> None:
    # #24 item 9: a long prefill holds the counters still; the canary queued behind it and timed out.
    engine = Engine(running=running, waiting=waiting, status=500)  # a canary would be a stall
    watcher, _ = _watch(engine, 1.0)
    assert engine.canaries == [] and watcher.stalled is None
    assert "requests running or waiting" in watcher.states[0].read


@pytest.mark.parametrize("body", [b"\xff\xfe\x00\x81 not text", b"vllm:generation_tokens_total \xff\n"])
def test_a_metrics_body_that_is_not_utf8_is_no_token_counters(body: bytes) -> None:
    # #24 item 12: UnicodeDecodeError killed the watch (and the stop exited 1).
    engine = Engine(metrics_body=body)
    watcher, _ = _watch(engine, 0.8)  # raises here if the watch died
    assert watcher.states[0].read == "no token counters"
    assert len(engine.canaries) >= 1 and watcher.stalled is None  # still watched: idle, canaried


def test_statuses_are_judged_progress_stall_or_a_wrong_canary() -> None:
    assert judge(200) == "ok"
    assert [judge(s) for s in (500, 502, 503, 504)] == ["failed"] * 4
    assert {judge(s) for s in (201, 301, 400, 401, 403, 404, 405, 422, 429)} == {"refused"}


def test_the_key_is_the_engines_own_the_plans_env_over_the_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _prefill_leader()
    plan = build_plan(settings, KIMI)
    assert plan.probes is not None and plan.probes.forward is not None
    assert plan.probes.forward.canary.api_key_env == "VLLM_API_KEY"

    def key_of(plan: Plan) -> str | None:
        assert plan.probes is not None
        watchers = build_watchers(plan, PodHealth(plan.probes), settings, Recorder(), parks=False)
        forward = next(w for w in watchers if isinstance(w, ForwardWatcher))
        return forward._api_key

    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert key_of(plan) is None
    monkeypatch.setenv("VLLM_API_KEY", "from-the-pod")  # the engine inherits the launcher's env
    assert key_of(plan) == "from-the-pod"
    engine = replace(plan.engine, env={**plan.engine.env, "VLLM_API_KEY": "from-the-plan"})  # recipe env
    assert key_of(replace(plan, processes=(engine, *plan.processes[1:]))) == "from-the-plan"
    assert engine_api_key(completion_canary(api_key_env=None), {"VLLM_API_KEY": "k"}) is None


def test_counters_that_are_no_count_are_unknown_in_livez_since_when_and_judged_as_still() -> None:
    # #40.1: NaN counters are no progress (NaN != NaN read as a step on every look): the idle engine
    # is canaried as a still one, and /livez says the signal is unknown, since when and why.
    engine = Engine(metrics_body=b"vllm:generation_tokens_total NaN\nvllm:prompt_tokens_total -Inf\n")
    watcher, _ = _watch(engine, 0.8)
    assert len(engine.canaries) >= 1 and watcher.stalled is None
    unknown = watcher.live_facts()["signal_unknown"]["engine"]
    assert unknown["why"] == "no counter sample is a count (NaN, ±Inf or negative)" and unknown["since"] > 0
    assert watcher.details()["engine"]["signal_unknown"].endswith(" s: judged as still")
    assert watcher.states[0].read == "no token counters, 2 sample(s) no count"
