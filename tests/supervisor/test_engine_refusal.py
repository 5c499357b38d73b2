"""An engine that refuses its configuration before loading weights (issue #33, item 6): in an LWS
group the pod parks with the engine's line as its reason instead of exiting into a recreate loop; a
crash after loading still ends the pod, and outside a group the engine's code is the pod's as before.
The STAND-IN engine refuses as vLLM's argparse does (tests/standins/vllm `refuse=`); the real engine's
refusals: tests/engines/test_engine_refusal.py."""

from __future__ import annotations

import signal
import time

from tests.supervisor.conftest import MakePod

LWS = {"LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_GROUP_SIZE": "1", "LWS_WORKER_INDEX": "0"}
REFUSED = "argument --max-model-len: invalid human_readable_int_or_auto value: 'abc'"
LINE = f"vllm serve: error: {REFUSED}"


def test_an_engine_refusing_its_flags_parks_the_pod_with_its_line(make_pod: MakePod) -> None:
    pod = make_pod({**LWS, "STANDIN_ENGINE": f"refuse={REFUSED}"}, render=False).start()
    live = pod.wait_probe("livez", 200, until=lambda body: body.get("phase") == "parked")
    assert LINE in live["parked"] and live["parked"].startswith("engine configuration: the engine refused it")
    for endpoint in ("startupz", "readyz"):
        status, body = pod.probe(endpoint)
        assert status == 503 and LINE in body["failing"]["parked"], body
    time.sleep(2)
    assert pod.proc is not None and pod.proc.poll() is None  # parked, not recreating the group
    assert "heals=by a rollout" in pod.output() or "'by a rollout'" in pod.output()
    stopped = time.monotonic()
    pod.signal(signal.SIGTERM)
    assert pod.finish(timeout=10) == 2, pod.output()
    assert time.monotonic() - stopped < 3
    message = pod.termination_log.read_text()
    assert message.startswith("engine configuration: the engine refused it (engine exited with code 2): ")
    assert LINE in message.splitlines()[0] and "stopped by SIGTERM" in message.splitlines()[0]
    assert message.splitlines()[-1] == LINE  # the engine's last lines follow the reason
    assert pod.leftovers() == []


def test_a_crash_after_loading_weights_still_ends_the_pod(make_pod: MakePod) -> None:
    """The same last line after the weights loaded: a crash a fresh group may not repeat."""
    pod = make_pod({**LWS, "STANDIN_ENGINE": f"slow-start=1,refuse={REFUSED}"}, render=False).start()
    assert pod.finish(timeout=30) == 2, pod.output()
    assert "parked" not in pod.output()
    assert pod.termination_log.read_text().startswith("engine exited with code 2")


def test_outside_a_group_the_refusal_ends_the_pod_with_the_engines_code(make_pod: MakePod) -> None:
    pod = make_pod({"STANDIN_ENGINE": f"refuse={REFUSED}"}, render=False).start()
    assert pod.finish(timeout=30) == 2, pod.output()
    assert "parked" not in pod.output()
    assert pod.termination_log.read_text().splitlines()[-1] == LINE


def test_a_crash_that_is_no_configuration_error_ends_the_pod(make_pod: MakePod) -> None:
    pod = make_pod({**LWS, "STANDIN_ENGINE": "exit=1"}, render=False).start()
    assert pod.finish(timeout=30) == 1, pod.output()
    assert "parked" not in pod.output()
