"""Runs `llm-d-launcher run` as a real subprocess, the way a container runtime would, and finds every
process it left behind (each run tags its environment, which children and orphans inherit)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.ports import free_port

STANDINS = Path(__file__).resolve().parent / "standins"
RUN_TAG = "LAUNCHER_TEST_RUN"  # not LLMD_*: the launcher warns about LLMD_ names that are no setting


def tagged(tag: str, key: str = RUN_TAG) -> list[psutil.Process]:
    """Live processes (not zombies) whose environment carries this run's tag under `key`."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(key) == tag and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def plan_children(launcher: int, recursive: bool = False) -> list[psutil.Process]:
    """The launcher's children (all its descendants, `recursive`) but its probe process
    (healthchecks/probe_process.py), which answers the probes and has no children."""
    return [
        child
        for child in psutil.Process(launcher).children(recursive=recursive)
        if not any(arg.endswith("probe_process.py") for arg in child.cmdline())
    ]


@dataclass
class LauncherPod:
    workdir: Path
    env: dict[str, str]
    port: int = 0  # the engine's HTTP port
    ports: dict[str, int] = field(default_factory=dict)  # other ports the test chose, by name
    probe_port: int = field(default_factory=free_port)  # the launcher's probe server
    seen: list[tuple[str, int | None, dict[str, Any]]] = field(default_factory=list)  # probe answers
    argv: list[str] = field(default_factory=lambda: ["run"])
    wrapper: list[str] = field(default_factory=list)  # runs the launcher through it (unshare, prlimit)
    tag: str = field(default_factory=lambda: uuid.uuid4().hex)
    proc: subprocess.Popen[str] | None = None
    stdout: str = ""
    stderr: str = ""

    def start(self) -> LauncherPod:
        env = {
            # This interpreter's bin first: stand-ins that speak ZMQ run with its pyzmq and msgpack.
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(self.workdir),
            # The launcher of this checkout, whichever checkout the venv was installed from.
            "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
            "LLMD_SHM_DIR": str(self.workdir / "shm"),
            "LLMD_TERMINATION_LOG": str(self.termination_log),
            "LLMD_RUNTIME_DIR": str(self.workdir / "run"),
            "LLMD_LOG_FORMAT": "text",
            "LLMD_PROBE_HOST": "127.0.0.1",
            "LLMD_PROBE_PORT": str(self.probe_port),
            RUN_TAG: self.tag,
            **self.env,
        }
        self._out = open(self.workdir / "stdout", "w+")  # noqa: SIM115 - closed in finish()
        self._err = open(self.workdir / "stderr", "w+")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*self.wrapper, sys.executable, "-m", "launcher", *self.argv],
            env=env,
            cwd=self.workdir,
            stdout=self._out,
            stderr=self._err,
            text=True,
        )
        return self

    @property
    def termination_log(self) -> Path:
        return self.workdir / "termination-log"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def output(self) -> str:
        return (self.workdir / "stdout").read_text() + (self.workdir / "stderr").read_text()

    def wait_for(self, text: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output():
                return
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"launcher exited {self.proc.returncode} before {text!r}:\n{self.output()}"
                )
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not seen within {timeout} s:\n{self.output()}")

    def probe(self, endpoint: str, timeout: float = 2.0) -> tuple[int | None, dict[str, Any]]:
        """GET the launcher's /livez, /readyz or /startupz: (status, JSON body); (None, {}) when
        nothing answers."""
        try:
            reply = httpx.get(f"http://127.0.0.1:{self.probe_port}/{endpoint}", timeout=timeout)
        except httpx.HTTPError:
            return None, {}
        body = reply.json() if reply.headers.get("content-type", "").startswith("application/json") else {}
        return reply.status_code, body

    def wait_probe(
        self,
        endpoint: str,
        status: int,
        timeout: float = 20.0,
        until: Callable[[dict[str, Any]], bool] | None = None,
    ) -> dict[str, Any]:
        """Poll a probe until it answers `status` (and its body satisfies `until`); its body then. The
        probe process holds answers up to one look old (healthchecks/probe_process.py PUBLISH_INTERVAL)."""
        deadline = time.monotonic() + timeout
        seen: tuple[int | None, dict[str, Any]] = (None, {})
        while time.monotonic() < deadline:
            seen = self.probe(endpoint)
            if seen[0] == status and (until is None or until(seen[1])):
                return seen[1]
            time.sleep(0.05)
        raise AssertionError(
            f"/{endpoint} never answered {status} in {timeout} s; last {seen}:\n{self.output()}"
        )

    def children(self) -> dict[str, psutil.Process]:
        """The launcher's direct children by process name as the plan names them (argv heuristics)."""
        out = {}
        for child in plan_children(self.pid):
            cmd = child.cmdline()
            out["render" if "render" in cmd else "engine"] = child
        return out

    def signal(self, sig: int = signal.SIGTERM) -> None:
        os.kill(self.pid, sig)

    def finish(self, timeout: float = 30.0) -> int:
        """Wait for the launcher to exit; return its code. Everything it started must be gone."""
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            self._out.close()
            self._err.close()
        self.stdout = (self.workdir / "stdout").read_text()
        self.stderr = (self.workdir / "stderr").read_text()
        return code

    def leftovers(self) -> list[psutil.Process]:
        return tagged(self.tag)

    def kill_everything(self) -> None:
        running = self.proc is not None and self.proc.poll() is None
        for proc in [*self.leftovers(), *([psutil.Process(self.pid)] if running else [])]:
            with contextlib.suppress(psutil.Error):
                proc.kill()
