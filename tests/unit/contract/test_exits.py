"""The exit-code table (launcher/contract/exits.py) is the one declaration: `run --help` and the
termination messages of the codes the launcher chooses come from it."""

from __future__ import annotations

import re

import pytest

from launcher.cli import main
from launcher.contract import exits
from launcher.contract.exits import EXIT_CODES


@pytest.mark.parametrize("row", EXIT_CODES, ids=lambda e: e.name)
def test_run_help_lists_every_exit_code_with_its_meaning(
    row: exits.ExitCode, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"{row.code} {row.meaning}" in help_text


def test_every_launcher_chosen_code_is_a_distinct_number() -> None:
    chosen = [e.number for e in EXIT_CODES if e.code.isdigit()]
    assert sorted(chosen) == [0, 1, 2, 3, 4, 5, 6, 7]


def test_reasons_fill_in_their_fields() -> None:
    assert exits.STALLED.says(detail="engine (:8000) made no progress") == (
        "engine stalled: engine (:8000) made no progress"
    )
    assert exits.STARTUP_DEADLINE.says(seconds=2700.0, where="loading weights") == (
        "start-up deadline: not started within LLMD_STARTUP_SECONDS=2700 s; stuck in loading weights"
    )
    quit_reason = "engine exited with code 0 although no stop was asked for"
    assert exits.ENGINE_QUIT.says(process="engine") == quit_reason
    assert not any(re.search(r"[{}]", e.meaning) for e in EXIT_CODES)
