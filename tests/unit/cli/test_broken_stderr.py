"""A bad input when stderr is closed, a pipe nobody reads, or a full device: still exit 2, and `run`
still writes the termination message (the kubelet shows it even when the log pipe is gone)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@contextmanager
def _stderr(kind: str) -> Iterator[dict[str, object]]:
    """Popen arguments giving the child this kind of stderr."""
    if kind == "closed":
        yield {"stderr": subprocess.DEVNULL, "preexec_fn": lambda: os.close(2)}
    elif kind == "broken pipe":
        read, write = os.pipe()
        os.close(read)
        try:
            yield {"stderr": write}
        finally:
            os.close(write)
    else:
        with open("/dev/full", "wb") as full:
            yield {"stderr": full}


@pytest.mark.parametrize("kind", ["closed", "broken pipe", "full device"])
@pytest.mark.parametrize("command", ["run", "plan", "probe live --timeout nan", "plan --bogus"])
def test_a_bad_input_exits_2_whatever_stderr_is(tmp_path: Path, kind: str, command: str) -> None:
    termination = tmp_path / "termination-log"
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(ROOT),
        "LLMD_GRACE_SECONDS": "soon",
        "LLMD_TERMINATION_LOG": str(termination),
    }
    with _stderr(kind) as stderr:
        done = subprocess.run(
            [sys.executable, "-m", "launcher", *command.split()],
            env=env,
            stdout=subprocess.PIPE,
            cwd=tmp_path,
            timeout=60,
            check=False,
            **stderr,  # type: ignore[call-overload]
        )
    assert done.returncode == 2, done
    assert done.stdout == b""  # no error line lands in the plan or the log stream instead
    if command == "run":
        assert termination.read_text().startswith("LLMD_GRACE_SECONDS: input should be a valid integer")


@pytest.mark.parametrize(
    "command", ["recipes schema", "recipes list", "recipes show pd-disaggregation", "version", "run --help"]
)
def test_a_reader_that_stops_early_ends_no_printing_command_in_a_traceback(command: str) -> None:
    """Issue #40.7: `llm-d-launcher recipes schema | head` ended in a BrokenPipeError traceback. The
    reader here is gone before a byte is written: each write, and the last flush, meet EPIPE."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "launcher", *command.split()],
            stdout=write, stderr=subprocess.PIPE, cwd=ROOT, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    assert b"Traceback" not in done.stderr and b"BrokenPipeError" not in done.stderr, done.stderr.decode()
    assert done.returncode != 0 or command.endswith("--help")  # argparse ignores a failed help write
