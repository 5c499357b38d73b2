"""Hostile numbers on the engine's /metrics (issue #40 item 1), served by the STAND-IN engine
(tests/standins/vllm, STANDIN_METRICS): NaN, ±Inf, 1e20 and negative samples, a counter missing from
every other read, a new label set on every read. No false verdict: an engine that steps, or that is
idle and answers its canaries, is never ended. No missed one: an engine hung with a request running
ends the pod with exit 5 within the step bound, whatever else its /metrics say."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.supervisor.conftest import MakePod
from tests.supervisor.test_liveness import BUSY, FAST, _complete, _wait_running

HOSTILE = ["extra=nan", "extra=+Inf", "extra=-Inf", "extra=1e20", "extra=-5", "flap", "churn"]
# A decode pod: its one step signal, the generation tokens, is all a hostile series beside it sums with.
DECODE = "{kv-transfer-config: {kv_connector: ExampleConnector, kv_role: kv_consumer}}"


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_hung_busy_engine_ends_the_pod_whatever_else_its_metrics_say(
    make_pod: MakePod, tmp_path: Path, hostile: str
) -> None:
    freeze = tmp_path / "freeze"
    env = {**BUSY, "STANDIN_ENGINE": f"freeze-steps={freeze}", "STANDIN_METRICS": hostile}
    pod = make_pod(env, render=False).start()  # prefill and decode: three step signals, two made hostile
    pod.wait_probe("startupz", 200)
    _complete(pod.port, {"prompt": "x", "max_tokens": 100_000}, [])
    _wait_running(pod)
    freeze.touch()  # the engine core hangs; /metrics answers, its token series still or no count
    assert pod.finish(timeout=30) == 5, pod.output()
    message = pod.termination_log.read_text()
    assert f"engine (:{pod.port}) has 1 request(s) running and made no engine step for " in message, message
    assert pod.leftovers() == [], pod.output()


@pytest.mark.parametrize("hostile", ["extra=1e20", "extra=+Inf", "extra=nan", "extra=-5", "flap", "churn"])
def test_a_stepping_engine_is_never_ended_whatever_else_its_metrics_say(
    make_pod: MakePod, hostile: str
) -> None:
    # 60 decode steps at 0.05 s: 3 s of steps against a 1 s bound; one series steps, the other is hostile
    pod = make_pod({**BUSY, "LLMD_STEP_SECONDS": "1", "STANDIN_METRICS": hostile}, render=False, args=DECODE)
    pod.start().wait_probe("startupz", 200)
    answers: list[int] = []
    request = _complete(pod.port, {"prompt": "x", "max_tokens": 60}, answers)
    _wait_running(pod)
    while request.is_alive():
        assert pod.probe("livez")[0] == 200, pod.output()
        time.sleep(0.1)
    assert answers == [200], pod.output()
    pod.signal(signal.SIGTERM)
    assert pod.finish() == 0, pod.output()


@pytest.mark.parametrize("running", ["-1", "nan", "+Inf"])
def test_an_idle_engine_whose_running_gauge_is_no_count_is_not_busy(make_pod: MakePod, running: str) -> None:
    # idle: its canaries answer every 1 s window; a gauge that is no count never makes it busy
    env = {**FAST, "LLMD_STEP_SECONDS": "1", "STANDIN_METRICS": f"running={running}"}
    pod = make_pod(env, render=False).start()
    pod.wait_probe("startupz", 200)
    until = time.monotonic() + 4
    while time.monotonic() < until:
        assert pod.probe("livez")[0] == 200, pod.output()
        time.sleep(0.1)
    pod.signal(signal.SIGTERM)
    assert pod.finish() == 0, pod.output()
