"""Liveness that tells the truth, over the stand-in engine: a stopped engine (SIGSTOP: its HTTP server
stops answering, as a vLLM whose engine core is stopped stops generating) ends the pod with exit 5; a
short stop does not; an overrun start-up ends it with exit 6 naming the phase; a stop deregisters
before it signals the engine."""

from __future__ import annotations

import signal
import time

import httpx

from tests.supervisor.conftest import MakePod

FAST = {  # seconds: still counters this long -> canary with this deadline; checks this often
    "LLMD_STALL_SECONDS": "1",
    "LLMD_CANARY_SECONDS": "1",
    "LLMD_CHECK_INTERVAL": "0.2",
    "LLMD_CHECK_TIMEOUT": "0.5",
}


def test_a_stopped_engine_is_stalled_and_ends_the_pod_with_exit_5(make_pod: MakePod) -> None:
    pod = make_pod(FAST, render=False).start()
    pod.wait_probe("startupz", 200)
    engine = pod.children()["engine"]
    stopped = time.monotonic()
    engine.send_signal(signal.SIGSTOP)
    answers = []  # /livez until the pod ends: 200, then 503 naming the stall (perhaps too briefly to see)
    while pod.proc is not None and pod.proc.poll() is None and time.monotonic() - stopped < 20:
        answers.append(pod.probe("livez"))
        time.sleep(0.05)
    ended = time.monotonic() - stopped
    code = pod.finish()
    assert code == 5, pod.output()
    for status, body in answers:
        assert status in (200, None) or body["reason"].startswith(f"engine stalled: engine (:{pod.port})")
    assert pod.leftovers() == [], pod.output()
    message = pod.termination_log.read_text()
    assert message.startswith(f"engine stalled: engine (:{pod.port}) made no progress for "), message
    assert "its canary timed out after 1 s" in message, message
    # stall 1 s + /metrics timeout 0.5 s + canary 1 s + one interval 0.2 s, then at most the kill margin
    # (3 s at the default 30 s grace; SIGCONT with the SIGTERM lets a stopped engine exit sooner), and
    # slack for a loaded box; the sidecars' 8 s window it used to wait would not fit
    assert ended < 1 + 0.5 + 1 + 0.2 + 3 + 2, (ended, pod.output())


def test_an_engine_stopped_briefly_is_no_false_alarm(make_pod: MakePod) -> None:
    # The canary's deadline outlasts each stop: a window that ends during a stop canaries at once.
    pod = make_pod({**FAST, "LLMD_STALL_SECONDS": "3", "LLMD_CANARY_SECONDS": "2"}, render=False).start()
    pod.wait_probe("startupz", 200)
    engine = pod.children()["engine"]
    for _ in range(3):  # stopped 1 s at a time: the canary (if any) answers once it runs again
        engine.send_signal(signal.SIGSTOP)
        time.sleep(1)
        engine.send_signal(signal.SIGCONT)
        time.sleep(0.5)
        assert pod.probe("livez")[0] == 200
    time.sleep(4)  # an idle window: one canary, answered
    assert pod.probe("livez")[0] == 200
    metrics = httpx.get(f"http://127.0.0.1:{pod.probe_port}/metrics").text
    assert 'llmd_launcher_forward_canaries_total{outcome="ok",source="engine"}' in metrics, metrics
    assert 'llmd_launcher_forward_canaries_total{outcome="failed",source="engine"} 0.0' in metrics, metrics
    pod.signal(signal.SIGTERM)
    assert pod.finish() == 0, pod.output()


def test_an_overrun_start_up_ends_the_pod_with_exit_6_naming_the_phase(make_pod: MakePod) -> None:
    # The stand-in loads for 10 s and ends a shard bar every 2 s (each bar is read once the next \r
    # comes): a 6 s deadline falls inside the load with a bar read, even if the stand-in starts late.
    pod = make_pod({"STANDIN_ENGINE": "slow-start=20", "LLMD_STARTUP_SECONDS": "6"}, render=False).start()
    code = pod.finish(timeout=30)
    assert code == 6, pod.output()
    assert pod.leftovers() == [], pod.output()
    message = pod.termination_log.read_text()
    assert message.startswith("start-up deadline: not started within LLMD_STARTUP_SECONDS=6 s; stuck in "), (
        message
    )
    assert "loading weights at " in message and " %" in message, message


def test_a_stop_deregisters_before_it_signals_the_engine(make_pod: MakePod) -> None:
    pod = make_pod({"LLMD_DEREGISTER_SECONDS": "2"}, render=False).start()
    pod.wait_probe("readyz", 200)
    pod.signal(signal.SIGTERM)
    termed = time.monotonic()
    assert pod.probe("readyz")[0] == 503  # not ready from the first moment
    answered = httpx.post(f"http://127.0.0.1:{pod.port}/v1/completions", json={"prompt": "x"}, timeout=5)
    assert answered.status_code == 200  # still serving while endpoints and the router catch up
    pod.wait_for("engine | stand-in draining", timeout=10)
    assert time.monotonic() - termed >= 1.9
    assert pod.finish() == 0, pod.output()
    assert "deregistering before the engine is signalled" in pod.stderr
