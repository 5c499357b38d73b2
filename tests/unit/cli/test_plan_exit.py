"""`plan` as the entry point runs it ends without the interpreter's teardown (launcher/cli.py
`_exit_now`): its output must still arrive whole, and a stdout that cannot take it must still fail
the command as the interpreter's own last flush does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import main

ROOT = Path(__file__).resolve().parents[3]


def _plan(*argv: str, stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[bytes]:
    """The real entry point, stdout block-buffered (no PYTHONUNBUFFERED): the plan sits in the buffer
    until the end."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "LLMD_RECIPE": "vllm-single-pod"}
    return subprocess.run(
        [sys.executable, "-m", "launcher", "plan", *argv], env=env, stdout=stdout, stderr=subprocess.PIPE
    )


def test_the_whole_plan_reaches_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    done = _plan("--format", "json")
    assert done.returncode == 0, done.stderr
    assert main(["plan", "--format", "json", "--recipe", "vllm-single-pod"]) == 0
    in_process = capsys.readouterr().out
    assert json.loads(done.stdout) == json.loads(in_process)


def test_a_stdout_that_cannot_take_the_plan_fails_the_command() -> None:
    with open("/dev/full", "wb") as full:  # every write: ENOSPC
        done = _plan(stdout=full.fileno())
    assert done.returncode == 120
    assert done.stderr.decode().splitlines()[-1] == (
        "llm-d-launcher: error: the output could not be written ([Errno 28] No space left on device)"
    )
