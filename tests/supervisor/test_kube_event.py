"""`run` records why its pod ended or parked as a Kubernetes Event on the pod's LeaderWorkerSet
(issue #33, item 3), posted to the loopback STAND-IN of the API server's Events endpoint
(tests/kube_api.py) with the ServiceAccount token mounted for the test; the token appears nowhere
in the pod's output."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube_api import EventsApi, serve_events_api
from tests.supervisor.conftest import MakePod

LWS = {"LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_GROUP_SIZE": "1", "LWS_WORKER_INDEX": "0"}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[EventsApi]:
    yield from serve_events_api(tmp_path)


def test_an_engine_crash_is_recorded_on_the_lws_before_the_pod_exits(
    make_pod: MakePod, api: EventsApi
) -> None:
    pod = make_pod({**LWS, **api.env(), "STANDIN_ENGINE": "exit=3@0.5"}, render=False).start()
    assert pod.finish(timeout=30) == 3, pod.output()
    (seen,) = api.seen
    assert seen.path == "/api/v1/namespaces/llm-d/events"
    assert seen.headers["Authorization"] == f"Bearer {api.token}"
    assert seen.body["involvedObject"]["name"] == "kimi-decode"
    assert seen.body["reason"] == "EngineExit"  # the engine's own code 3, not the launcher's EngineQuit
    first_line = pod.termination_log.read_text().splitlines()[0]
    assert seen.body["message"] == f"pod kimi-decode-0: {first_line}"
    assert "Kubernetes Event recorded" in pod.output() and api.token not in pod.output()


def test_a_parked_pod_records_its_reason_once_and_not_again_when_deleted(
    make_pod: MakePod, api: EventsApi
) -> None:
    pod = make_pod({**LWS, **api.env()}, render=False)
    (pod.workdir / "model" / "config.json").unlink()
    pod.start()
    pod.wait_probe("livez", 200, until=lambda body: body.get("phase") == "parked")
    deadline = time.monotonic() + 10
    while not api.seen and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(3)  # two re-checks with the same reason: no second Event
    (seen,) = api.seen
    assert seen.body["reason"] == "BadInput" and "holds no config.json" in seen.body["message"]
    pod.signal(signal.SIGTERM)
    assert pod.finish(timeout=10) == 2
    assert len(api.seen) == 1  # a rollout's deletion of a parked pod says nothing new
    assert api.token not in pod.output()


def test_a_refused_event_is_one_line_and_the_pod_still_exits_with_its_code(
    make_pod: MakePod, api: EventsApi
) -> None:
    api.answer = 403
    pod = make_pod({**LWS, **api.env(), "STANDIN_ENGINE": "exit=3"}, render=False).start()
    assert pod.finish(timeout=30) == 3
    said = [line for line in pod.output().splitlines() if "no Kubernetes Event recorded" in line]
    assert len(said) == 1 and "403" in said[0]
    assert pod.termination_log.read_text().startswith("engine exited with code 3")


def test_a_token_of_two_lines_is_refused_in_one_line_that_shows_neither(
    make_pod: MakePod, api: EventsApi
) -> None:
    """Issue #40.2: it raised in the header check, and the thread's traceback printed both lines."""
    (api.account_dir / "token").write_text("first-half-of-the-token\nsecond-half-of-the-token\n")
    pod = make_pod({**LWS, **api.env(), "STANDIN_ENGINE": "exit=3"}, render=False).start()
    assert pod.finish(timeout=30) == 3
    output = pod.output()
    said = [line for line in output.splitlines() if "no Kubernetes Event recorded" in line]
    assert len(said) == 1 and "not one header-safe line" in said[0], output
    assert "Traceback" not in output and "half-of-the-token" not in output
    assert api.seen == []


def test_no_ca_crt_is_no_event_and_one_line_saying_why(make_pod: MakePod, api: EventsApi) -> None:
    (api.account_dir / "ca.crt").unlink()
    pod = make_pod({**LWS, **api.env(), "STANDIN_ENGINE": "exit=3"}, render=False).start()
    assert pod.finish(timeout=30) == 3
    said = [line for line in pod.output().splitlines() if "no Kubernetes Event recorded" in line]
    assert len(said) == 1 and "LLMD_EVENT_SYSTEM_CA" in said[0], pod.output()
    assert api.seen == [] and api.token not in pod.output()
