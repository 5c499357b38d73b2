"""Signals and pipes: an early SIGTERM, stray signals, the launcher's own death, a stalled log reader,
a re-spawning grandchild, and an LLMD_SHM_DIR that points at the model."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from tests.pods import RUN_TAG, LauncherPod, tagged
from tests.supervisor.conftest import MakePod


def _standin_started(text: str) -> bool:
    return "stand-in engine up" in text or "started      process=" in text or "started process=" in text


def test_early_sigterm_never_lets_the_engine_start(make_pod: MakePod) -> None:
    # Below ~50 ms Python itself is still starting (site, .pth files): the default action kills the
    # launcher then (outside PID 1), before anything could be spawned. docs/running-a-pod.md "Signals".
    for delay in (0.005, 0.02, 0.05, 0.08, 0.12, 0.2, 0.25, 0.3):
        pod = make_pod().start()
        time.sleep(delay)
        pod.signal(signal.SIGTERM)
        code = pod.finish()
        assert code in (0, -signal.SIGTERM) and pod.leftovers() == [], (delay, code, pod.output())
        assert not _standin_started(pod.output()), (delay, pod.output())
        if delay >= 0.2:  # measured: kept from ~50-80 ms on an idle box
            assert code == 0, (delay, pod.output())


def test_stray_signals_do_not_kill_the_launcher(make_pod: MakePod) -> None:
    pod = make_pod().start()
    pod.wait_for("engine | stand-in engine up")
    for _ in range(20):
        pod.signal(signal.SIGHUP)
        pod.signal(signal.SIGUSR1)
        pod.signal(signal.SIGUSR2)
    time.sleep(0.5)
    assert pod.proc is not None and pod.proc.poll() is None, pod.output()
    assert pod.probe("livez")[0] == 200
    pod.signal(signal.SIGTERM)
    assert pod.finish() == 0, pod.output()
    assert pod.leftovers() == [] and "ignoring signal signal=SIGHUP" in pod.stderr


def test_children_die_with_a_killed_launcher(make_pod: MakePod) -> None:
    pod = make_pod().start()
    pod.wait_for("render | stand-in render up")
    pod.wait_for("engine | stand-in engine up")
    pod.signal(signal.SIGKILL)
    assert pod.finish() == -signal.SIGKILL
    deadline = time.monotonic() + 5
    while pod.leftovers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pod.leftovers() == []
    try:
        httpx.get(f"http://127.0.0.1:{pod.port}/health", timeout=1)
        raise AssertionError("the engine's port still answers")
    except httpx.HTTPError:
        pass


def test_a_respawning_grandchild_never_outlives_the_launcher(make_pod: MakePod) -> None:
    for run in range(5):
        pod = make_pod({"STANDIN_ENGINE": f"respawn={Path(os.devnull)}", "LLMD_GRACE_SECONDS": "2"})
        pod.env["STANDIN_ENGINE"] = f"respawn={pod.workdir / 'respawn.pids'}"
        pod.start()
        pod.wait_for("engine | stand-in engine up")
        time.sleep(0.3)
        pod.signal(signal.SIGTERM)
        pod.finish()
        time.sleep(0.3)  # a replacement forked at the last moment would show up by now
        assert pod.leftovers() == [], (run, pod.output())


def test_a_stray_that_reforks_every_5_ms_and_ignores_sigterm_is_killed_at_the_grace(
    make_pod: MakePod,
) -> None:
    # Issue #40.6: a stop's look at /proc raced the stray's fork (its parent gone, the successor not
    # listed yet) and 3 pods of 5 exited at once, the stray left running. Several pods at a time:
    # each is one more draw of the race.
    pods = []
    for _ in range(5):
        pod = make_pod({"LLMD_GRACE_SECONDS": "4"}, render=False)
        pod.env["STANDIN_ENGINE"] = f"respawn={pod.workdir / 'respawn.pids'}@0.005"
        pods.append(pod.start())
        pod.wait_for("engine | stand-in engine up", timeout=60)
    time.sleep(0.3)
    for pod in pods:
        pod.signal(signal.SIGTERM)
    for pod in pods:
        assert pod.finish() == 0, pod.output()
    ran_on = [(n, len(pod.leftovers())) for n, pod in enumerate(pods) if pod.leftovers()]
    assert ran_on == [], (ran_on, [p.output()[-2000:] for p in pods])


def _piped_env(pod: LauncherPod) -> dict[str, str]:
    """The env LauncherPod.start would give, for a launcher whose output pipes the test holds itself."""
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(pod.workdir),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "LLMD_TERMINATION_LOG": "",
        "LLMD_SHM_DIR": "",
        "LLMD_RUNTIME_DIR": str(pod.workdir / "run"),
        "LLMD_LOG_FORMAT": "text",
        "LLMD_PROBE_HOST": "127.0.0.1",
        "LLMD_PROBE_PORT": str(pod.probe_port),
        RUN_TAG: pod.tag,
        **pod.env,
    }


def test_a_stalled_log_reader_does_not_freeze_the_launcher(make_pod: MakePod) -> None:
    pod = make_pod({"STANDIN_ENGINE": "lines=20000"}, render=False)
    env = _piped_env(pod)
    proc = subprocess.Popen(
        [sys.executable, "-m", "launcher", "run"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,  # never read until the end: the pipe fills at 64 KiB
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{pod.probe_port}/livez", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(2)  # the engine's 3.4 MB of lines are long past the pipe's 64 KiB by now
        started = time.monotonic()
        assert httpx.get(f"http://127.0.0.1:{pod.probe_port}/livez", timeout=2).status_code == 200
        proc.send_signal(signal.SIGTERM)
        while proc.poll() is None:
            assert time.monotonic() - started < 10, "SIGTERM waits for the log reader"
            time.sleep(0.05)
        assert proc.returncode == 0 and tagged(pod.tag) == []
    finally:
        _kill_everything(proc, pod)


def test_dropped_lines_are_counted_once_the_reader_catches_up(make_pod: MakePod) -> None:
    pod = make_pod({"STANDIN_ENGINE": "lines=20000"}, render=False)
    env = _piped_env(pod)
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "run"], env=env, stderr=subprocess.PIPE)
    try:
        time.sleep(4)  # stalled: the engine's 3.4 MB of lines overflow the 1 MiB queue
        assert proc.stderr is not None
        os.set_blocking(proc.stderr.fileno(), False)
        got = b""
        deadline = time.monotonic() + 15
        while b"lines dropped" not in got and time.monotonic() < deadline:
            with contextlib.suppress(BlockingIOError, TypeError):
                got += proc.stderr.read() or b""
            time.sleep(0.05)
        assert b"lines dropped" in got, got[-2000:]
        metrics = httpx.get(f"http://127.0.0.1:{pod.probe_port}/metrics", timeout=5).text
        (dropped,) = [
            line for line in metrics.splitlines() if line.startswith("llmd_launcher_log_lines_dropped")
        ]
        assert float(dropped.split()[-1]) > 0, dropped
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        _kill_everything(proc, pod)


def test_shm_dir_at_the_model_is_refused_and_the_model_kept(make_pod: MakePod) -> None:
    pod = make_pod()
    model = pod.workdir / "model"
    (model / "psm_1a2b3c4d").write_bytes(b"a shard")  # even a name an engine would use
    before = sorted(p.name for p in model.iterdir())
    pod.env["LLMD_SHM_DIR"] = str(model)
    pod.start()
    assert pod.finish() == 2
    assert "LLMD_SHM_DIR" in pod.stderr and pod.leftovers() == []
    assert "psm_1a2b3c4d" in before and sorted(p.name for p in model.iterdir()) == before


def test_a_slow_reader_still_gets_every_line_said_before_the_exit(make_pod: MakePod) -> None:
    """The entry point ends with os._exit (no loop teardown, no interpreter clean-up): lines still
    queued for a reader that fell behind are written first (within FINAL_DRAIN_SECONDS), and the
    termination message is on disk by the time the exit is seen. A container runtime may read the
    pipe a little after the engine's death; the engine's last words are the ones a post-mortem needs."""
    pod = make_pod({"STANDIN_ENGINE": "lines=2000,exit=3"})  # ~330 KB of text: 5 pipes' worth
    env = {**_piped_env(pod), "LLMD_TERMINATION_LOG": str(pod.termination_log)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "launcher", "run"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        time.sleep(1.0)  # not read meanwhile: the engine has said everything and died by now
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 3, err[-2000:]
        lines = err.decode().splitlines()
        said = [line for line in lines if line.startswith("engine | stand-in log line ")]
        assert len(said) == 2000, (len(said), lines[-5:])
        assert "engine | stand-in exiting with 3" in lines, lines[-5:]
        assert "] exiting code=3 " in lines[-1], lines[-5:]  # the launcher's last line, last
        assert "lines dropped" not in err.decode()
        assert pod.termination_log.read_text().startswith("engine exited with code 3")
    finally:
        _kill_everything(proc, pod)


def _kill_everything(proc: subprocess.Popen[bytes], pod: LauncherPod) -> None:
    """A launcher started by hand (not through the pod's own start) and whatever it left."""
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    for leftover in tagged(pod.tag):
        with contextlib.suppress(psutil.Error):
            leftover.kill()
