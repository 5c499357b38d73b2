"""Exit codes (launcher/contract/exits.py) and the termination message (launcher/supervise/outcome.py,
written by launcher/run.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from launcher.contract.errors import ConfigError
from launcher.contract.exits import exit_code_of
from launcher.supervise.ending import write_termination_message
from launcher.supervise.outcome import TERMINATION_LIMIT, Outcome


def test_exit_codes_follow_the_shell_convention() -> None:
    assert (exit_code_of(0), exit_code_of(3), exit_code_of(-9), exit_code_of(-15)) == (0, 3, 137, 143)


def test_termination_message_keeps_the_reason_and_the_newest_lines() -> None:
    outcome = Outcome(3, "engine exited with code 3", [f"line {i} " + "x" * 200 for i in range(100)])
    message = outcome.termination_message()
    assert len(message.encode()) <= TERMINATION_LIMIT
    lines = message.splitlines()
    assert lines[:3] == ["engine exited with code 3", "last output:", "…"]
    assert lines[-1].startswith("line 99 ")
    assert Outcome(1, "short", ["a", "b"]).termination_message() == "short\nlast output:\na\nb"


def test_termination_message_keeps_the_head_within_4_kib(tmp_path: Path) -> None:
    path = tmp_path / "termination-log"
    message = "engine exited with code 3\n" + "é" * 5000
    write_termination_message(str(path), message)
    written = path.read_bytes()
    assert len(written) <= TERMINATION_LIMIT
    assert written.decode().startswith("engine exited with code 3\n")  # cut at a character boundary


def test_termination_message_skipped_quietly_when_not_writable(tmp_path: Path) -> None:
    write_termination_message(str(tmp_path / "missing-dir" / "log"), "reason")
    write_termination_message("", "reason")


def test_termination_message_skipped_when_a_fifo_no_one_reads_is_named(tmp_path: Path) -> None:
    """open(2) of a FIFO for writing waits for a reader: the launcher hung at its exit, past SIGTERM."""
    fifo = tmp_path / "termination-log"
    os.mkfifo(fifo)
    writer = threading.Thread(target=write_termination_message, args=(str(fifo), "reason"), daemon=True)
    writer.start()
    writer.join(10)
    stuck = writer.is_alive()
    if stuck:  # a reader releases it, so the test ends either way
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(10)
    assert not stuck


def test_unknown_placeholder_refuses_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` never starts a plan with a $(POD_IP) left in it."""
    import asyncio

    import structlog

    from healthchecks.state import PodHealth
    from launcher.config.recipe_file import RecipeSource, load_recipe
    from launcher.config.settings import load_settings
    from launcher.run import Inputs, _prepare
    from roles import build_plan

    monkeypatch.setenv("LLMD_RECIPE", "vllm-single-pod")
    settings = load_settings()
    recipe = load_recipe(RecipeSource("vllm-single-pod", None))
    plan = build_plan(settings, recipe)
    with pytest.raises(ConfigError) as err:
        inputs = Inputs(settings, recipe, plan)
        asyncio.run(_prepare(inputs, structlog.get_logger(), ["x"], PodHealth(plan.probes), set()))
    assert str(err.value).startswith("POD_IP: is not set but the plan needs it")
