"""Issue #34: a setting's value of any depth or size is bad input at worst, never a traceback:
LLMD_EXTRA_ENV of 100,000 `[` ended `plan` with the RecursionError the JSON decoder raised, exit 1."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.config.settings import Settings, env_name

DEEP = "[" * 100_000
LARGE = '{"A": "' + "x" * 100_000 + '"}'  # a value as large as one environment string may be (128 KiB)


@pytest.mark.parametrize("field", sorted(Settings.model_fields))
@pytest.mark.parametrize("value", [DEEP, LARGE], ids=["deep", "large"])
def test_any_value_of_any_setting_is_one_line_at_worst(run_cli: Any, field: str, value: str) -> None:
    code, _, err = run_cli("plan", env={env_name(field): value})
    assert code in (0, 2), (code, err[-300:])
    assert "Traceback" not in err and "Error:" not in err.replace("error:", "")
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("llm-d-launcher: error: "), err[-300:]
        assert len(lines[0]) < 1000  # the value is not echoed whole


def test_deeply_nested_json_names_the_setting(run_cli: Any) -> None:
    code, out, err = run_cli("plan", env={"LLMD_EXTRA_ENV": DEEP})
    assert (code, out) == (2, "")
    assert err.startswith("llm-d-launcher: error: LLMD_EXTRA_ENV ") and "nested too deeply" in err, err
