"""Liveness that tells the truth, over the stand-in engine: a stopped engine (SIGSTOP: its HTTP server
stops answering, as a vLLM whose engine core is stopped stops generating) ends the pod with exit 5; a
short stop does not; an overrun start-up ends it with exit 6 naming the phase; a stop deregisters
before it signals the engine."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx

from tests.pods import LauncherPod
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


# ------------------------------------------------------------------ #32: a busy engine judged by its steps
BUSY = {**FAST, "LLMD_STALL_SECONDS": "60", "LLMD_STEP_SECONDS": "2"}  # no canary can decide here


def _complete(port: int, body: dict[str, object], answers: list[int]) -> threading.Thread:
    """A user's request, in flight on its own thread (its status lands in answers, or -1)."""

    def send() -> None:
        try:
            answers.append(
                httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60).status_code
            )
        except httpx.HTTPError:
            answers.append(-1)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def _wait_running(pod: LauncherPod, timeout: float = 10.0) -> None:
    """Until the engine's /metrics says a request runs."""
    until = time.monotonic() + timeout
    while (
        'vllm:num_requests_running{engine="0",model_name="m"} 0.0'
        in httpx.get(f"http://127.0.0.1:{pod.port}/metrics").text
    ):
        assert time.monotonic() < until, pod.output()
        time.sleep(0.05)


def test_frozen_steps_with_a_request_running_end_the_pod_with_exit_5_naming_it(
    make_pod: MakePod, tmp_path: Path
) -> None:
    freeze = tmp_path / "freeze"
    pod = make_pod({**BUSY, "STANDIN_ENGINE": f"freeze-steps={freeze}"}, render=False).start()
    pod.wait_probe("startupz", 200)
    _complete(pod.port, {"prompt": "x", "max_tokens": 100_000}, [])
    _wait_running(pod)
    freeze.touch()  # the engine core hangs; the API server answers /metrics with still counters
    frozen = time.monotonic()
    code = pod.finish(timeout=30)
    assert code == 5, pod.output()
    message = pod.termination_log.read_text()
    assert message.startswith(
        f"engine stalled: engine (:{pod.port}) has 1 request(s) running and made no engine step for "
    ), message
    assert "over the bound of 2 s (LLMD_STEP_SECONDS" in message and "/metrics: " in message, message
    assert "canary" not in message, message
    # the bound 2 s + two intervals 0.4 s, then at most the kill margin (3 s), and slack for a loaded box
    assert time.monotonic() - frozen < 2 + 0.4 + 3 + 3, pod.output()
    assert pod.leftovers() == [], pod.output()


def test_a_long_prefill_making_steps_is_no_stall(make_pod: MakePod) -> None:
    # 100 chunks at 0.05 s: 5 s of prefill (bound 1 s) in which only the KV usage moves, as in vLLM
    # (prompt tokens count once its prefill ends, generation tokens once it decodes).
    pod = make_pod({**BUSY, "LLMD_STEP_SECONDS": "1"}, render=False).start()
    pod.wait_probe("startupz", 200)
    answers: list[int] = []
    request = _complete(pod.port, {"prompt": "x", "prompt_chunks": 100, "max_tokens": 20}, answers)
    _wait_running(pod)
    while request.is_alive():
        assert pod.probe("livez")[0] == 200, pod.output()
        time.sleep(0.1)
    assert answers == [200]
    assert pod.probe("livez")[0] == 200
    pod.signal(signal.SIGTERM)
    assert pod.finish() == 0, pod.output()


def test_a_decode_deadlock_while_prompt_tokens_move_ends_a_decode_pod(
    make_pod: MakePod, tmp_path: Path
) -> None:
    deadlock = tmp_path / "deadlock"
    consumer = "{kv-transfer-config: {kv_connector: ExampleConnector, kv_role: kv_consumer}}"
    pod = make_pod(
        {**BUSY, "STANDIN_ENGINE": f"decode-deadlock={deadlock}"}, render=False, args=consumer
    ).start()
    pod.wait_probe("startupz", 200)
    _complete(pod.port, {"prompt": "x", "max_tokens": 100_000}, [])
    _wait_running(pod)
    deadlock.touch()
    until = time.monotonic() + 20
    while pod.proc is not None and pod.proc.poll() is None and time.monotonic() < until:
        # prefills go on: prompt tokens and KV usage move
        _complete(pod.port, {"prompt": "x", "prompt_chunks": 2}, [])
        time.sleep(0.2)
    assert pod.finish() == 5, pod.output()
    message = pod.termination_log.read_text()
    assert "request(s) running and made no engine step for " in message, message
    assert "vllm:generation_tokens_total still" in message, message


def test_a_key_no_header_can_carry_is_refused_before_start_naming_the_variable(make_pod: MakePod) -> None:
    pod = make_pod({"VLLM_API_KEY": "s3cret-from-a-file\n"}, render=False).start()
    assert pod.finish(timeout=20) == 2, pod.output()
    assert "stand-in engine up" not in pod.output()  # nothing spawned
    lines = [line for line in pod.stderr.splitlines() if line.startswith("llm-d-launcher: error:")]
    assert lines == [
        "llm-d-launcher: error: VLLM_API_KEY: holds a character no HTTP header can carry (a control "
        "character such as a trailing newline, or one outside Latin-1), so neither the canary nor any "
        "client can send it; remove it from VLLM_API_KEY (a Secret from a file: create it without the "
        "trailing newline, e.g. `kubectl create secret generic --from-literal`)"
    ], pod.stderr
    assert "s3cret" not in pod.output() and "s3cret" not in pod.termination_log.read_text()
