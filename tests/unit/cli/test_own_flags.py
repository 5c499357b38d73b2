"""The launcher's own command line: no abbreviations (as it forbids them in engine flags), and what an
image holds (`--version`, `version`)."""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from launcher.config.recipe_file import builtin_recipe_names
from roles.flags import load_catalog


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--pod", "x"],
        ["plan", "--group-s", "2"],
        ["plan", "--form", "json"],
    ],
)
def test_the_launchers_own_flags_take_no_abbreviation(run_cli: Any, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run_cli(*argv)
    assert exit_.value.code == 2


@pytest.mark.parametrize("argv", [["--version"], ["version"]])
def test_version_names_launcher_recipes_and_engine_catalogues(
    run_cli: Any, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    try:
        code, out, _ = run_cli(*argv)
    except SystemExit as exc:  # --version ends parsing, as argparse's own action does
        code, out = int(exc.code or 0), capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("llm-d-launcher 0.")
    recipes = resources.files("launcher.config").joinpath("recipes")
    for name in builtin_recipe_names():
        digest = hashlib.sha256(recipes.joinpath(f"{name}.yaml").read_bytes()).hexdigest()[:12]
        assert f"recipe {name} sha256:{digest}" in lines
    catalogs = Path(__file__).parents[3] / "roles" / "catalogs"
    for path in sorted(catalogs.glob("*.json")):
        data = json.loads(path.read_text())
        name = path.stem.rpartition("-")[0]  # <catalogue>-<version>.json
        assert f"engine catalogue {name}: {data['engine']} {data['version']}" in lines
        assert load_catalog(name, data["version"]).version == data["version"]
