"""The launcher as PID 1 of its own PID namespace, as a container's ENTRYPOINT runs (`unshare -pf`).
With a /proc of its own it reaps orphans re-parented to it and stops on SIGTERM. With the host's /proc
it refuses to start: there, being pid 1, every process on the host would look like its child, and
the sweep at the end of a stop signals every descendant."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import psutil

from tests.pods import LauncherPod, plan_children
from tests.supervisor.conftest import MakePod

PID_NAMESPACE = ["unshare", "--user", "--map-root-user", "--pid", "--fork"]


def _launcher(pod: LauncherPod) -> psutil.Process:
    """unshare's forked child: the launcher, PID 1 inside the namespace."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = psutil.Process(pod.pid).children()
        if children:
            return children[0]
        time.sleep(0.05)
    raise AssertionError(f"unshare started nothing:\n{pod.output()}")


def _namespace_pid(proc: psutil.Process) -> int:
    """The innermost of /proc/PID/status NSpid: the pid the process sees itself as."""
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    raise AssertionError("no NSpid line")


def test_with_the_hosts_proc_the_launcher_refuses_and_signals_nobody(make_pod: MakePod) -> None:
    bystander = subprocess.Popen(["sleep", "60"])  # a process of the host: never the launcher's to stop
    try:
        pod = make_pod()
        pod.wrapper = PID_NAMESPACE  # no --mount-proc: /proc still shows the host's PID namespace
        code = pod.start().finish()
        assert code == 2, pod.output()
        lines = [line for line in pod.stderr.splitlines() if line.startswith("llm-d-launcher: error:")]
        assert len(lines) == 1 and "/proc: belongs to another PID namespace" in lines[0], pod.stderr
        assert "--mount-proc" in lines[0]
        assert "process=engine" not in pod.stderr  # nothing spawned
        assert bystander.poll() is None
        assert pod.leftovers() == []
    finally:
        bystander.kill()
        bystander.wait()


def test_as_pid_1_it_reaps_orphans_and_stops_on_sigterm(make_pod: MakePod, tmp_path: Path) -> None:
    pidfile = tmp_path / "orphan.pid"
    pod = make_pod({"STANDIN_RENDER": f"orphan={pidfile}"})
    pod.wrapper = [*PID_NAMESPACE, "--mount-proc"]
    pod.start()
    pod.wait_probe("readyz", 200)
    launcher = _launcher(pod)
    assert _namespace_pid(launcher) == 1
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text()):
        assert time.monotonic() < deadline, pod.output()
        time.sleep(0.05)
    # The render sidecar's detached grandchild (double fork + setsid) is re-parented to PID 1: the launcher.
    children = sorted(_namespace_pid(p) for p in plan_children(launcher.pid))
    assert len(children) == 3 and int(pidfile.read_text()) in children, (children, pod.output())
    launcher.send_signal(signal.SIGTERM)
    code = pod.finish()  # unshare exits with its child's code
    assert code == 0, pod.output()
    assert pod.leftovers() == [], pod.output()


def test_as_pid_1_a_killed_launcher_takes_the_engines_workers_along(make_pod: MakePod) -> None:
    """The parent-death signal reaches only the launcher's direct children: outside a PID namespace
    the engine's workers (its grandchildren) outlive a SIGKILLed launcher (docs/running-a-pod.md,
    "Signals"). In a pod the launcher is PID 1, and the kernel kills every process of the namespace
    when PID 1 dies (pid_namespaces(7)), its grandchildren included."""
    pod = make_pod({"STANDIN_ENGINE": "workers=2"})
    pod.wrapper = [*PID_NAMESPACE, "--mount-proc"]
    pod.start()
    pod.wait_for("engine | stand-in engine up")
    launcher = _launcher(pod)
    engine = next(c for c in launcher.children() if "serve" in c.cmdline())
    assert len(engine.children()) == 2, pod.output()
    launcher.kill()
    pod.finish()  # unshare's own code when its child died of a signal varies between versions
    deadline = time.monotonic() + 5
    while pod.leftovers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pod.leftovers() == [], pod.output()
