"""The launcher's own command line: no abbreviations (as it forbids them in engine flags), and what an
image holds (`--version`, `version`)."""

from __future__ import annotations

import hashlib
import json
import re
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


def test_version_names_the_catalogue_the_image_built_first(run_cli: Any, tmp_path: Path) -> None:
    """An image's `version` says which engine its flags are checked against: the catalogue
    `catalog build` wrote from the image's own engine (LLMD_CATALOG_DIR), which `run` uses before the
    built-in ones; a broken one is named, as `run` would refuse it."""
    built_in = Path(__file__).parents[3] / "roles" / "catalogs" / "vllm-serve-0.32.0.json"
    (tmp_path / "vllm-serve-0.32.0.json").write_text(built_in.read_text())
    code, out, _ = run_cli("version", env={"LLMD_CATALOG_DIR": str(tmp_path)})
    catalogues = [line for line in out.splitlines() if line.startswith("engine catalogue")]
    image = tmp_path / "vllm-serve-0.32.0.json"
    assert (
        code == 0
        and catalogues[0] == f"engine catalogue vllm-serve: vllm serve 0.32.0 (built in this image: {image})"
    )
    assert "engine catalogue vllm-serve: vllm serve 0.32.0" in catalogues[1:]  # the built-in one, after
    image.write_text("{")
    code, out, _ = run_cli("version", env={"LLMD_CATALOG_DIR": str(tmp_path)})
    assert code == 0 and f"engine catalogue: LLMD_CATALOG_DIR: {image} is not a flag catalogue" in out


def test_only_the_named_commands_parser_is_built(capsys: pytest.CaptureFixture[str]) -> None:
    """Every command's parser costs `plan` its set-up: the word that names a command builds that
    one; anything else (help, a root flag, a typo) builds them all, for the full list and errors."""
    from launcher.cli import _COMMANDS, _parser

    with pytest.raises(SystemExit):  # built for `plan`: it knows no other command
        _parser("plan").parse_args(["probe", "live"])
    assert "invalid choice" in capsys.readouterr().err
    assert _parser("probe").parse_args(["probe", "live"]).which == "live"
    listed = _parser(None).format_help()
    assert list(_COMMANDS) == [
        "plan", "run", "recipes", "version", "catalog", "probe", "lint", "capabilities", "local-group"
    ]  # fmt: skip
    assert all(re.search(rf"^    {name}\b", listed, re.M) for name in _COMMANDS)
