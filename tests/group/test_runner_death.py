"""`local-group` SIGKILLed: everything it started goes with it (issue #24 item 8). A group of two
stand-in pods (tests/standins/vllm): namespace holders, launchers and engines; the runner re-executes
itself under its own `unshare -rnm`, as a user's run does, so its bridge and mounts die with it too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.pods import STANDINS
from tests.ports import free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.group


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out


def test_a_sigkilled_runner_leaves_no_process_behind(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"name: standin\nmodel: {{path: {model}}}\ndefault_pool: p\npools:\n  p:\n    kind: vllm\n"
        f"    nodes: 2\n    tensor_parallel: 2\n    port: 8000\n    master_port: {free_port()}\n"
    )
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONPATH": str(REPO),
        "HOME": str(tmp_path),
        "LLMD_BIN_PATH": str(STANDINS),
        "LLMD_RECIPE_FILE": str(recipe),
        "LLMD_LOG_FORMAT": "text",
    }
    workdir = tmp_path / "group"
    argv = [
        sys.executable,
        "-m",
        "launcher",
        "local-group",
        "--workdir",
        str(workdir),
        "--status-every",
        "60",
    ]
    with open(tmp_path / "runner.out", "w") as out:
        runner = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        logs = [workdir / "standin-p-0" / "output.log", workdir / "standin-p-0-1" / "output.log"]
        while not all(p.exists() and "stand-in engine up" in p.read_text() for p in logs):
            assert runner.poll() is None and time.monotonic() < deadline, (
                tmp_path / "runner.out"
            ).read_text()
            time.sleep(0.2)
        started = [p.pid for p in psutil.Process(runner.pid).children(recursive=True)]
        launchers = [pod["pid"] for pod in json.loads((workdir / "pods.json").read_text())["pods"]]
        assert len(started) >= 6 and set(launchers) <= set(started), started  # holders, launchers, engines
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        deadline = time.monotonic() + 5
        while _alive(started) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _alive(started)
        assert left == [], [" ".join(psutil.Process(pid).cmdline()) for pid in _alive(left)]
    finally:
        for pid in _alive([runner.pid, *locals().get("started", [])]):
            os.kill(pid, signal.SIGKILL)
