"""Compiles each built-in recipe (launcher/config/recipes/NAME.yaml) to what the package loads: its
mapping as JSON (NAME.json, the `launcher:` section settings read) and the recipe validated by the
schema, as JSON (validated/NAME.json, launcher/config/validated.py), so a dry-run of a built-in recipe
neither imports PyYAML nor builds the schema's validator. Edit the YAML, then run this from the
repository root: `.venv/bin/python scripts/compile_recipes.py`. The drift test
(tests/unit/config/test_builtin_recipes_compiled.py) fails while either differs from its YAML.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from launcher.config.recipe_file import (  # noqa: E402
    builtin_recipe_names,
    compiled_builtin,
    validated_builtin,
)

RECIPES = ROOT / "launcher" / "config" / "recipes"
VALIDATED = RECIPES / "validated"


def main() -> None:
    names = builtin_recipe_names()
    for stale in [p for p in [*RECIPES.glob("*.json"), *VALIDATED.glob("*.json")] if p.stem not in names]:
        stale.unlink()
    VALIDATED.mkdir(exist_ok=True)
    for name in names:
        (RECIPES / f"{name}.json").write_text(compiled_builtin(name), encoding="utf-8")
        (VALIDATED / f"{name}.json").write_text(validated_builtin(name), encoding="utf-8")
        print(f"wrote launcher/config/recipes/{name}.json and validated/{name}.json")


if __name__ == "__main__":
    main()
