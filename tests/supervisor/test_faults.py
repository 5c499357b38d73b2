"""Fault tests: each asserts the exit code, the message, and that no process is left behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from launcher.supervise.shm_ledger import LEDGER_NAME, read_ledger
from tests.pods import LauncherPod, plan_children
from tests.supervisor.conftest import MakePod


def assert_clean_exit(pod: LauncherPod, code: int, expected: int) -> None:
    assert code == expected, pod.output()
    assert pod.leftovers() == [], pod.output()


@pytest.fixture
def shm() -> Iterator[Path]:
    """A directory of our own on the machine's /dev/shm (a tmpfs), removed after the test."""
    root = Path(tempfile.mkdtemp(prefix="llmd-test-", dir="/dev/shm"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_sigterm_stops_engine_and_sidecar_with_exit_0(make_pod: MakePod, shm: Path) -> None:
    pod = make_pod({"LLMD_SHM_DIR": str(shm)})  # files named as a crashed engine's, never ours
    for name in ("psm_1a2b3c4d", "vllm_offload_0.mmap"):
        (shm / name).write_bytes(b"stale")
    (shm / LEDGER_NAME).write_bytes(b"{corrupt")
    pod.start()
    pod.wait_for("render | stand-in render up")
    pod.wait_for("engine | stand-in engine up")
    assert httpx.get(f"http://127.0.0.1:{pod.port}/health").status_code == 200
    pod.signal(signal.SIGTERM)
    assert_clean_exit(pod, pod.finish(), 0)
    assert "engine | stand-in draining up to 17s" in pod.stdout  # --shutdown-timeout from grace 30
    assert "removed stale shared-memory files count=0" in pod.stderr
    left = [line for line in pod.stderr.splitlines() if "not removed: not proven the launcher's own" in line]
    assert len(left) == 1 and "count=2" in left[0], pod.stderr
    assert pod.stderr.count("shared-memory ledger treated as empty") == 1, pod.stderr
    assert sorted(p.name for p in shm.iterdir()) == [LEDGER_NAME, "psm_1a2b3c4d", "vllm_offload_0.mmap"]
    assert not pod.termination_log.exists()  # written only for a non-zero exit


def test_a_crashed_engines_segment_is_removed_at_the_next_start(make_pod: MakePod, shm: Path) -> None:
    """llm-d/llm-d#352: the engine crashes leaving the segment it held; the container restarts (same
    /dev/shm) and the next launcher removes it, proven its own by the ledger; another's file stays."""
    segment, theirs = shm / "psm_5e9a0001", shm / "psm_7e1e0001"
    theirs.write_bytes(b"another program's, closed, to be attached later")
    crashed = make_pod({"LLMD_SHM_DIR": str(shm), "STANDIN_ENGINE": f"shm={segment}"}).start()
    crashed.wait_for("engine | stand-in engine up")
    _wait_recorded(shm, segment.name, crashed)
    crashed.children()["engine"].kill()
    assert_clean_exit(crashed, crashed.finish(), 137)
    assert segment.exists()  # left by the crash
    restarted = make_pod({"LLMD_SHM_DIR": str(shm)}).start()
    restarted.wait_for("engine | stand-in engine up")
    restarted.signal(signal.SIGTERM)
    assert_clean_exit(restarted, restarted.finish(), 0)
    removed = [line for line in restarted.stderr.splitlines() if "removed stale shared-memory" in line]
    assert len(removed) == 1 and "count=1" in removed[0] and segment.name in removed[0], removed
    assert not segment.exists() and theirs.exists()
    assert "not removed: not proven the launcher's own" in restarted.stderr


def _wait_recorded(shm: Path, name: str, pod: LauncherPod, timeout: float = 20.0) -> None:
    """Until the running launcher's ledger names the file (its first sample comes soon after spawning)."""
    deadline = time.monotonic() + timeout
    while name not in read_ledger(shm).files(None):  # the pods have no POD_NAME: the host's name
        assert time.monotonic() < deadline, pod.output()
        time.sleep(0.1)


def test_engine_killed_by_sigkill_exits_137_promptly(make_pod: MakePod) -> None:
    pod = make_pod().start()
    pod.wait_for("render | stand-in render up")
    pod.wait_for("engine | stand-in engine up")
    engine = pod.children()["engine"]
    killed = time.monotonic()
    engine.kill()
    code = pod.finish()
    took = time.monotonic() - killed
    assert_clean_exit(pod, code, 137)
    assert took < 5, took  # generous bound for a loaded CI box; bench/ measures the real latency
    message = pod.termination_log.read_text()
    assert message.startswith("engine was killed by SIGKILL"), message
    stopped = [
        line for line in pod.stderr.splitlines() if "process exited" in line and "process=render" in line
    ]
    assert stopped, pod.stderr  # the sidecar was stopped, not abandoned


def test_engine_exit_3_during_startup(make_pod: MakePod) -> None:
    pod = make_pod({"STANDIN_ENGINE": "exit=3@0.3"}).start()
    assert_clean_exit(pod, pod.finish(), 3)
    message = pod.termination_log.read_text()
    assert message.splitlines()[0] == "engine exited with code 3"
    assert "stand-in exiting with 3" in message  # the engine's own last words, after the reason


def test_an_engine_that_exits_0_unasked_fails_the_pod(make_pod: MakePod) -> None:
    """vLLM's DP supervisor exits 0 after tearing its ranks down when one died: that is no success."""
    pod = make_pod({"STANDIN_ENGINE": "exit=0@0.3"}).start()
    assert_clean_exit(pod, pod.finish(), 3)
    message = pod.termination_log.read_text()
    assert message.splitlines()[0] == "engine exited with code 0 although no stop was asked for"


def test_sidecar_crashes_twice_then_stays_up(make_pod: MakePod, tmp_path: Path) -> None:
    counter = tmp_path / "render-starts"
    pod = make_pod({"STANDIN_RENDER": f"crash-first=2@{counter}"}).start()
    pod.wait_for("render | stand-in render up")
    assert counter.read_text() == "3"
    restarts = [line for line in pod.output().splitlines() if "restarting sidecar" in line]
    assert len(restarts) == 2 and "attempt=2" in restarts[1], restarts
    assert pod.proc is not None and pod.proc.poll() is None  # the engine never noticed
    pod.signal(signal.SIGTERM)
    assert_clean_exit(pod, pod.finish(), 0)


def test_sidecar_crash_loop_past_the_bound_ends_the_pod(make_pod: MakePod, tmp_path: Path) -> None:
    env = {"STANDIN_RENDER": f"crash-first=99@{tmp_path / 'n'}", "LLMD_SIDECAR_RESTARTS": "2"}
    pod = make_pod(env).start()
    assert_clean_exit(pod, pod.finish(), 1)
    message = pod.termination_log.read_text()
    assert message.startswith("sidecar render exited with code 1 and crash-looped: 3 exits within 300 s")
    assert "stand-in crash 3 of 99" in message


def test_child_ignoring_sigterm_is_killed_at_the_deadline(make_pod: MakePod) -> None:
    pod = make_pod({"STANDIN_ENGINE": "ignore-term", "LLMD_GRACE_SECONDS": "4"}).start()
    pod.wait_for("engine | stand-in engine up")
    started = time.monotonic()
    pod.signal(signal.SIGTERM)
    code = pod.finish()
    took = time.monotonic() - started
    assert_clean_exit(pod, code, 137)  # the engine's fate: SIGKILL
    assert 2.5 <= took < 4, took  # grace 4 s: SIGKILL at 3 s, before the kubelet would
    assert "engine was killed by SIGKILL while stopping" in pod.termination_log.read_text()


def test_orphaned_grandchild_is_reaped(make_pod: MakePod, tmp_path: Path) -> None:
    short, long = tmp_path / "short.pid", tmp_path / "long.pid"
    pod = make_pod({"STANDIN_ENGINE": f"orphan={short}@0.5", "STANDIN_RENDER": f"orphan={long}"}).start()
    pod.wait_for("render | stand-in render up")
    deadline = time.monotonic() + 10
    while not (short.exists() and long.exists() and short.read_text() and long.read_text()):
        assert time.monotonic() < deadline, pod.output()
        time.sleep(0.05)
    pod.wait_for(f"reaped orphaned process code=0 pid={short.read_text()}", timeout=10)
    orphan = psutil.Process(int(long.read_text()))
    assert orphan.ppid() == pod.pid  # re-parented to the launcher (child subreaper), not to init
    pod.signal(signal.SIGTERM)
    assert_clean_exit(pod, pod.finish(), 0)
    assert not psutil.pid_exists(orphan.pid)


def test_leader_name_never_resolves(make_pod: MakePod) -> None:
    lws = {"LWS_LEADER_ADDRESS": "leader.invalid", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"}
    # Not parked (LLMD_PARK_SECONDS=0): the subject is the bounded wait (parking: test_parking.py).
    pod = make_pod({**lws, "LLMD_LEADER_WAIT_SECONDS": "2", "LLMD_PARK_SECONDS": "0"}, nodes=2).start()
    started = time.monotonic()
    code = pod.finish()
    assert_clean_exit(pod, code, 2)
    assert time.monotonic() - started < 30  # bounded, not fast: 2 s of waiting, the rest is load
    expected = "error: LWS_LEADER_ADDRESS: leader.invalid did not resolve to an IP within 2 s"
    assert expected in pod.stderr
    assert "process=engine" not in pod.stderr  # nothing spawned


def test_leader_name_resolves_and_the_engine_gets_the_ip(make_pod: MakePod) -> None:
    lws = {"LWS_LEADER_ADDRESS": "localhost", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"}
    pod = make_pod(lws, nodes=2).start()
    pod.wait_for("engine | stand-in engine up")
    started = next(line for line in pod.output().splitlines() if "started" in line and "engine" in line)
    assert "'--master-addr', '127.0.0.1'" in started or "'--master-addr', '::1'" in started, started
    assert "'--headless'" in started
    pod.signal(signal.SIGTERM)
    assert_clean_exit(pod, pod.finish(), 0)


def test_port_already_taken(make_pod: MakePod) -> None:
    pod = make_pod()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", pod.port))
        holder.listen()
        pod.start()
        code = pod.finish()
    assert_clean_exit(pod, code, 2)
    expected = f"error: port {pod.port}: engine's http port is already in use by pid {os.getpid()}"
    assert expected in pod.stderr
    assert pod.termination_log.read_text().startswith(f"port {pod.port}:")


def test_model_path_missing(make_pod: MakePod) -> None:
    pod = make_pod()
    (pod.workdir / "model" / "config.json").unlink()
    pod.start()
    assert_clean_exit(pod, pod.finish(), 2)
    assert "error: model.path: " in pod.stderr and "holds no config.json" in pod.stderr


def test_binary_missing(make_pod: MakePod) -> None:
    pod = make_pod({"LLMD_BIN_PATH": ""}).start()
    assert_clean_exit(pod, pod.finish(), 2)
    assert "error: process engine: vllm is not found" in pod.stderr
    assert "error: process render: vllm is not found" in pod.stderr


def test_sigterm_during_preflight_exits_0_with_nothing_started(make_pod: MakePod) -> None:
    lws = {"LWS_LEADER_ADDRESS": "leader.invalid", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"}
    pod = make_pod({**lws, "LLMD_LEADER_WAIT_SECONDS": "60"}, nodes=2).start()
    pod.wait_for("waiting for LWS_LEADER_ADDRESS to resolve", timeout=15)
    started = time.monotonic()
    pod.signal(signal.SIGTERM)
    code = pod.finish()
    assert_clean_exit(pod, code, 0)  # a requested stop that completed: nothing was running
    assert time.monotonic() - started < 3
    assert "stopped by SIGTERM during preflight (resolving LWS_LEADER_ADDRESS leader.invalid)" in pod.stderr
    assert "process=engine" not in pod.stderr and not pod.termination_log.exists()


def test_sigterm_during_engine_startup(make_pod: MakePod) -> None:
    pod = make_pod({"STANDIN_ENGINE": "slow-start=30"}).start()
    pod.wait_for("engine | INFO stand-in Starting to load model")
    pod.signal(signal.SIGTERM)
    code = pod.finish(timeout=10)
    assert_clean_exit(pod, code, 0)  # the engine drained (nothing in flight) and exited 0
    assert "stand-in engine up" not in pod.stdout


def test_secrets_never_reach_output_or_termination_message(make_pod: MakePod) -> None:
    secret, extra = "hf_s3cr3t_value_123", "sk-extra-env-secret-9"
    env = {
        "HF_TOKEN": secret,  # the pod's own env (from a Secret)
        "LLMD_EXTRA_ENV": json.dumps({"MY_API_KEY": extra}),  # added by the plan
        "TOKENIZERS_PARALLELISM": "false",  # a harmless name that merely contains TOKEN
        "STANDIN_ENGINE": "say=token $HF_TOKEN key $MY_API_KEY tp $TOKENIZERS_PARALLELISM,exit=4@0.5",
    }
    pod = make_pod(env).start()
    assert_clean_exit(pod, pod.finish(), 4)
    message = pod.termination_log.read_text()
    for text in (pod.output(), message):
        assert secret not in text and extra not in text
    assert "engine | token <redacted> key <redacted> tp false" in pod.stdout
    assert "token <redacted> key <redacted>" in message


def test_termination_message_keeps_the_reason_and_the_newest_lines(make_pod: MakePod) -> None:
    pod = make_pod({"STANDIN_ENGINE": "lines=100,exit=3@0.2"}).start()
    assert_clean_exit(pod, pod.finish(), 3)
    message = pod.termination_log.read_bytes()
    assert len(message) <= 4096
    lines = message.decode().splitlines()
    assert lines[:3] == ["engine exited with code 3", "last output:", "…"]
    assert lines[-1] == "stand-in exiting with 3"  # the newest line, where tracebacks name the error
    assert lines[-2].startswith("stand-in log line 99 ")


def test_sigterm_reaches_the_engine_main_process_not_its_workers(make_pod: MakePod) -> None:
    """vLLM's TP workers die on SIGTERM; the API server drains and then stops them itself. Signalling
    the engine's whole group would abort in-flight requests."""
    pod = make_pod({"STANDIN_ENGINE": "workers=2"}, render=False).start()
    pod.wait_for("engine | stand-in engine up")
    assert len(plan_children(pod.pid, recursive=True)) == 3
    pod.signal(signal.SIGTERM)
    assert_clean_exit(pod, pod.finish(), 0)
    assert "worker got SIGTERM" not in pod.stdout


def test_json_logs_carry_the_process_name(make_pod: MakePod) -> None:
    pod = make_pod({"LLMD_LOG_FORMAT": "json", "STANDIN_ENGINE": "exit=5@0.3"}).start()
    assert_clean_exit(pod, pod.finish(), 5)
    records = [json.loads(line) for line in pod.stdout.splitlines() + pod.stderr.splitlines()]
    assert {"process": "engine", "stream": "stderr", "message": "stand-in exiting with 5"}.items() <= next(
        r for r in records if r.get("process") == "engine" and "stream" in r
    ).items()
    assert any(r.get("message") == "exiting" and r.get("code") == 5 for r in records)


def test_bad_input_spawns_nothing(make_pod: MakePod) -> None:
    pod = make_pod({"LLMD_EXTRA_ARGS": "--port 1"}).start()
    assert_clean_exit(pod, pod.finish(), 2)
    assert pod.stderr.startswith("llm-d-launcher: error: LLMD_EXTRA_ARGS")
    assert "Traceback" not in pod.output()


def test_a_killed_engines_workers_are_reparented_to_the_launcher_and_stopped(make_pod: MakePod) -> None:
    """The engine's workers outlive its SIGKILLed main process; the launcher is their child
    subreaper (PR_SET_CHILD_SUBREAPER), so they become its children and its stop reaches them, not
    the node's init."""
    pod = make_pod({"STANDIN_ENGINE": "workers=2"}).start()
    pod.wait_for("render | stand-in render up")
    pod.wait_for("engine | stand-in engine up")
    engine = pod.children()["engine"]
    workers = engine.children()
    assert len(workers) == 2, pod.output()
    engine.kill()
    assert_clean_exit(pod, pod.finish(), 137)
    orphans = [line for line in pod.stderr.splitlines() if "reaped orphaned process" in line]
    assert sorted(int(line.split("pid=")[1].split()[0]) for line in orphans) == sorted(w.pid for w in workers)
