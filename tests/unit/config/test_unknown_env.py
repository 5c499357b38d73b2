"""An LLMD_* variable that names no setting: a warning with the setting meant, an error when strict."""

from __future__ import annotations

from typing import Any

import pytest


def test_an_unknown_llmd_variable_is_warned_about_with_the_setting_meant(run_cli: Any) -> None:
    code, _, err = run_cli("plan", env={"LLMD_STALL_SECOND": "30", "LLMD_FOO": "1"})
    assert code == 0
    assert (
        "llm-d-launcher: warning: LLMD_STALL_SECOND: names no launcher setting and has no effect; "
        "did you mean LLMD_STALL_SECONDS?"
    ) in err
    assert "LLMD_FOO: names no launcher setting and has no effect; `llm-d-launcher plan --help` lists" in err


def test_names_the_launcher_sets_itself_are_not_unknown(run_cli: Any) -> None:
    code, _, err = run_cli(
        "plan", env={"LLMD_LOCAL_GROUP": "t", "LLMD_POD_IFNAME": "eth0", "LLMD_POOL": "decode"}
    )
    assert code == 0 and "warning" not in err


@pytest.mark.parametrize("strict", [["--strict-env", "true"], []])
def test_an_unknown_llmd_variable_is_an_error_when_strict(run_cli: Any, strict: list[str]) -> None:
    env = {"LLMD_STALL_SECOND": "30"} | ({} if strict else {"LLMD_STRICT_ENV": "true"})
    code, out, err = run_cli("plan", *strict, env=env)
    assert code == 2 and out == ""
    assert "llm-d-launcher: error: LLMD_STALL_SECOND: names no launcher setting" in err
