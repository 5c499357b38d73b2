"""Compiles each built-in recipe (launcher/config/recipes/NAME.yaml) to the JSON the package loads
(NAME.json), so a dry-run of a built-in recipe never imports PyYAML. Edit the YAML, then run this
from the repository root: `.venv/bin/python scripts/compile_recipes.py`. The drift test
(tests/unit/config/test_builtin_recipes_compiled.py) fails while a JSON differs from its YAML.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from launcher.config.recipe_file import builtin_recipe_names  # noqa: E402
from launcher.config.recipe_yaml import compiled_builtin  # noqa: E402

RECIPES = ROOT / "launcher" / "config" / "recipes"


def main() -> None:
    names = builtin_recipe_names()
    for stale in {p.stem for p in RECIPES.glob("*.json")} - set(names):
        (RECIPES / f"{stale}.json").unlink()
    for name in names:
        (RECIPES / f"{name}.json").write_text(compiled_builtin(name), encoding="utf-8")
        print(f"wrote launcher/config/recipes/{name}.json")


if __name__ == "__main__":
    main()
