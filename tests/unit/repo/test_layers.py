"""The layering the README draws: the import contract runs in tests/check.sh (`lint-imports`); these
check what a contract cannot: which modules the dry-run path loads."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[3]

TPU_MANIFEST = ROOT / "deploy" / "kimi-k3.1-pro" / "tpu" / "tpu.yaml"
HEAVY = ("asyncio", "aiohttp", "zmq", "healthchecks.server", "launcher.supervise.supervisor")


def _loaded_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nimport json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "LLMD_RECIPE": "kimi-k3.1-pro"},
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


@pytest.mark.parametrize(
    "code",
    [
        "import launcher.cli",
        "from launcher.cli import main\nmain(['plan', '--format', 'json'])",
        "from launcher.cli import main\nmain(['plan', '--group', '--pool', 'decode'])",
        f"from launcher.cli import main\nmain(['lint', '-f', '{TPU_MANIFEST}'])",
    ],
    ids=["import", "plan", "plan-group", "lint"],
)
def test_dry_run_loads_no_event_loop_or_sockets(code: str) -> None:
    """pydantic-settings (2.16) imports asyncio itself (`pydantic_settings/main.py`, for its async CLI
    commands); the launcher's own dry-run code adds none of these on top of its settings library."""
    loaded = _loaded_after(code) - _loaded_after("import pydantic_settings")
    assert not {m for m in loaded if m.split(".")[0] in HEAVY or m in HEAVY}


def test_dry_run_of_a_builtin_recipe_loads_no_yaml_nor_other_commands() -> None:
    """PyYAML's import is ~10 ms of `plan` (bench/results/plan_speed.md): only a recipe *file* needs
    it; the built-in recipes load from their compiled JSON. No other command's module is loaded."""
    loaded = _loaded_after("from launcher.cli import main\nmain(['plan', '--format', 'json'])")
    assert not loaded & {"yaml", "launcher.localgroup", "launcher.run", "healthchecks.probe"}


@pytest.mark.parametrize(
    ("recipe_env", "built"),
    [
        ({"LLMD_RECIPE": "kimi-k3.1-pro"}, []),
        ({"LLMD_RECIPE_FILE": str(ROOT / "launcher/config/recipes/kimi-k3.1-pro.yaml")}, ["Recipe"]),
    ],
    ids=["built-in", "file"],
)
def test_dry_run_builds_one_recipe_validator_for_a_file_and_none_for_a_built_in(
    recipe_env: dict[str, str], built: list[str]
) -> None:
    """pydantic builds a model's validator when its class is created unless `defer_build` is set;
    `plan` of a recipe file needs one, `Recipe`'s, which covers the whole tree. One per class made
    importing the recipe module cost several times that one build. A built-in recipe ships validated
    (scripts/compile_recipes.py): its dry-run builds none."""
    probe = (
        "import json, sys\n"
        "import launcher.config.recipe as r\n"
        "models = [v for v in vars(r).values() if isinstance(v, type) and issubclass(v, r._Data)]\n"
        "built = lambda: sorted(m.__name__ for m in models if m.__pydantic_complete__)\n"
        "at_import = built()\n"
        "from launcher.cli import main\n"
        "main(['plan', '--format', 'json'])\n"
        "print(json.dumps([at_import, built(), len(models), hasattr(r, 'annotations')]), file=sys.stderr)"
    )
    err = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", **recipe_env},
    ).stderr
    at_import, after_plan, models, future_annotations = json.loads(err.splitlines()[-1])
    assert models > 5  # the probe found the recipe models
    assert at_import == []
    assert after_plan == built
    # `from __future__ import annotations` would make pydantic compile each annotation from its text.
    assert future_annotations is False


def _module(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/").replace("/", ".")


def test_readme_layers_are_the_import_contract() -> None:
    """The README's layer table and the import-linter contract name the same layers in one order."""
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in contract["contracts"] if c["type"] == "layers"]
    enforced = [sorted(m.strip() for m in layer.split("|")) for layer in layers]
    readme = (ROOT / "README.md").read_text().split("## Architecture", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[2] for line in readme.splitlines() if line.startswith("| ") and "`" in line]
    drawn = [sorted(_module(m) for m in re.findall(r"`([^`]+)`", row)) for row in rows]
    # The entry-point row holds two layers (cli above run).
    assert [m for layer in enforced for m in layer] == [m for row in drawn for m in row]
