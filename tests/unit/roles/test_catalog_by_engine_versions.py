"""`plan` off the cluster checks a pool against the catalogue its recipe names (issue #41 item 3): the
newest built-in one the pool's engine_versions admits, a note when none does, and --engine-version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

RECIPE = (
    "name: v33\nmodel: {{path: /m}}\ndefault_pool: p\npools:\n  p:\n    kind: vllm\n"
    "    engine_versions: {versions}\n    args: {{enable-prefix-caching: false{extra}}}\n"
)


def _env(tmp_path: Path, versions: str, extra: str = "") -> dict[str, str]:
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE.format(versions=versions, extra=extra))
    return {"LLMD_RECIPE_FILE": str(path)}


def test_a_0_33_recipe_is_checked_and_written_for_0_33(plan_json: Any, tmp_path: Path) -> None:
    """Was checked against 0.32.0: --monokernel refused, `false` written as 0.32's --no-enable-X."""
    plan = plan_json(env=_env(tmp_path, '"==0.33.*"', ", monokernel: true"))
    assert plan["host_needs"]["flag_catalog"]["version"] == "0.33.0"
    argv = plan["processes"][0]["argv"]
    assert "--disable-prefix-caching" in argv and "--monokernel" in argv
    assert not any("engine_versions" in n for n in plan["notes"])


def test_a_range_no_catalogue_meets_is_said(plan_json: Any, tmp_path: Path) -> None:
    """Was rc 0 against 0.32.0 without a word."""
    notes = plan_json(env=_env(tmp_path, '">=0.40"'))["notes"]
    assert any(n.startswith("pool p's engine_versions '>=0.40' admits no flag catalogue here") for n in notes)


def test_engine_version_chooses_the_catalogue(plan_json: Any, run_cli: Any, tmp_path: Path) -> None:
    env = _env(tmp_path, '">=0.32"')
    assert plan_json(env=env)["host_needs"]["flag_catalog"]["version"] == "0.33.0"  # the newest
    plan = plan_json("--engine-version", "0.32.0", env=env)
    assert plan["host_needs"]["flag_catalog"]["version"] == "0.32.0"
    assert "--no-enable-prefix-caching" in plan["processes"][0]["argv"]
    code, out, err = run_cli("plan", "--engine-version", "0.34.0", env=env)
    assert (code, out) == (2, "")
    assert err.strip() == (
        "llm-d-launcher: error: --engine-version: vllm 0.34.0 has no flag catalogue here; use one of "
        "0.27.0, 0.27.1, 0.32.0, 0.33.0, or build its catalogue (llm-d-launcher catalog build)"
    )
    notes = plan_json("--engine-version", "0.32.0", env=_env(tmp_path, '"==0.33.*"'))["notes"]
    assert any("engine_versions '==0.33.*' admits no flag catalogue" in n for n in notes)
