"""The probe process under `run` (healthchecks/probe_process.py): a hung launcher fails its probes
instead of being answered for by a stale snapshot, and the probe process dies with the launcher."""

from __future__ import annotations

import signal
import socket
import time

import psutil

from tests.pods import LauncherPod
from tests.polling import ended
from tests.supervisor.conftest import MakePod


def probe_process(pod: LauncherPod) -> psutil.Process:
    return next(
        c for c in psutil.Process(pod.pid).children() if any("probe_process.py" in a for a in c.cmdline())
    )


def test_a_hung_launcher_fails_its_probes_and_recovers(make_pod: MakePod) -> None:
    pod = make_pod().start()
    pod.wait_probe("readyz", 200)
    pod.signal(signal.SIGSTOP)  # hung: its loop publishes nothing; the probe process still answers
    try:
        began = time.monotonic()
        live = pod.wait_probe("livez", 503, timeout=5)
        assert time.monotonic() - began < 4  # silent for 2 s, then the next probe says so
        assert live["live"] is False and "the launcher has published nothing for" in live["reason"]
        status, ready = pod.probe("readyz")
        assert status == 503 and list(ready["failing"]) == ["launcher"]
    finally:
        pod.signal(signal.SIGCONT)
    assert pod.wait_probe("livez", 200, timeout=2) == {
        "live": True,
        "phase": "started",
        "step_seconds": 180.0,
    }
    pod.wait_probe("readyz", 200, timeout=2)
    pod.signal(signal.SIGTERM)
    assert pod.finish() == 0
    assert pod.leftovers() == []


def test_the_probe_process_dies_with_the_launcher(make_pod: MakePod) -> None:
    pod = make_pod().start()
    pod.wait_probe("readyz", 200)
    front = probe_process(pod)
    pod.signal(signal.SIGKILL)
    assert pod.finish() == -signal.SIGKILL
    front.wait(timeout=2)  # PR_SET_PDEATHSIG: killed with the launcher
    refused = False
    try:
        socket.create_connection(("127.0.0.1", pod.probe_port), timeout=1).close()
    except ConnectionRefusedError:
        refused = True
    assert refused  # nothing answers for a launcher that is gone
    pod.kill_everything()  # the stand-ins die with it too (their own PDEATHSIG); be sure


def test_the_probe_process_outlives_the_stop_and_ends_before_the_launcher(make_pod: MakePod) -> None:
    pod = make_pod({"STANDIN_RENDER": "ignore-term", "LLMD_GRACE_SECONDS": "4"}).start()
    pod.wait_probe("readyz", 200)
    front = probe_process(pod)
    pod.signal(signal.SIGTERM)
    body = pod.wait_probe("readyz", 503, timeout=1)  # the supervisor's stop signals every descendant ...
    assert body["failing"] == {"pod": "shutting down"}
    time.sleep(1)
    assert front.is_running() and pod.probe("livez")[0] == 200  # ... but not the probe process
    assert pod.finish() == 0
    assert ended(front.pid)
