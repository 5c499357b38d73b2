"""A recipe pool's engine_versions specifier against the engine installed (packages.outside_versions)."""

from __future__ import annotations

from typing import Any

from launcher.supervise.host.packages import outside_versions


def test_an_engine_inside_the_specifier_passes() -> None:
    assert outside_versions("vllm", "0.32.0+cpu", ">=0.32,<0.34", "/py") is None
    assert outside_versions("vllm", "0.33.0", ">=0.32,<0.34", "/py") is None


def test_an_engine_outside_is_refused_naming_both_versions_and_the_fix() -> None:
    problem = outside_versions("vllm", "0.34.1", ">=0.32,<0.34", "/venv/bin/python")
    assert problem is not None
    assert "written for vllm >=0.32,<0.34 but /venv/bin/python has vllm 0.34.1" in problem.message
    assert "engine_versions" in problem.fix
    missing = outside_versions("vllm", None, ">=0.32", "/py")
    assert missing is not None and "no vllm package metadata" in missing.message


def test_a_bad_specifier_is_a_recipe_error(run_cli: Any, tmp_path: Any) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: r\nmodel: {path: /m}\ndefault_pool: p\n"
        "pools:\n  p: {kind: vllm, engine_versions: 'about 0.32'}\n"
    )
    code, _, err = run_cli("plan", env={"LLMD_RECIPE_FILE": str(recipe)})
    assert code == 2 and "engine_versions" in err and "version specifier" in err
    recipe.write_text(recipe.read_text().replace("about 0.32", ">=0.32,<0.34"))
    code, out, _ = run_cli("plan", "--format", "json", env={"LLMD_RECIPE_FILE": str(recipe)})
    assert code == 0 and '"engine_versions": ">=0.32,<0.34"' in out
