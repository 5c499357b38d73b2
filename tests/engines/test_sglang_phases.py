"""SGLang's start-up phases (roles/engines/sglang.py) against the installed SGLang 0.5.23's own
source: each pattern is a line it logs, and the one that opens "initializing distributed" is logged
before the process groups are built, where a group whose pods share /dev/shm without sharing the
network hangs (MessageQueue.wait_until_ready after in_the_same_node_as), so a start-up deadline there
names that phase, not the one before."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from launcher.contract.phases import DISTRIBUTED_INIT
from launcher.contract.plan import PhasePattern
from roles.engines.sglang import SGLANG
from tests.engines.engine_venvs import engine_bin

pytestmark = pytest.mark.engines


def sglang_source() -> Path:
    python = engine_bin("sglang", "python")
    (package,) = python.parent.parent.glob("lib/python3*/site-packages/sglang/srt")
    return package


def installed_patterns() -> tuple[PhasePattern, ...]:
    """The phase lines the descriptor gives for the sglang venv's release."""
    lines = SGLANG.phase_lines("0.5.23")
    assert lines is not None
    return lines.patterns


def logged_lines(source: Path) -> dict[Path, str]:
    return {path: path.read_text(errors="replace") for path in source.rglob("*.py")}


def test_every_sglang_phase_pattern_is_a_line_sglang_logs() -> None:
    sources = logged_lines(sglang_source())
    for pattern in installed_patterns():
        # a string literal holding it (the line holds the pattern: healthchecks/progress.py)
        logging = re.compile(rf"[\"'][^\"'\n]*{re.escape(pattern.text)}")
        assert any(logging.search(text) for text in sources.values()), f"SGLang never logs {pattern.text!r}"


def test_the_distributed_phase_opens_before_the_groups_that_can_hang_are_built() -> None:
    (pattern,) = [p for p in installed_patterns() if p.phase == DISTRIBUTED_INIT]
    bootstrap = (sglang_source() / "distributed" / "bootstrap.py").read_text()
    announced = bootstrap.index(f'logger.info("{pattern.text}')
    groups = bootstrap.index("_init_parallel_groups(", announced)  # the call, after the line
    assert announced < groups
    parallel_state = (sglang_source() / "distributed" / "parallel_state.py").read_text()
    assert "def in_the_same_node_as(" in parallel_state  # the /dev/shm test the refusal is about
