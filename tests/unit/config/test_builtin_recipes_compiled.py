"""The built-in recipes ship twice: the YAML people read and edit, and the JSON `plan` loads without
PyYAML (scripts/compile_recipes.py). The JSON must say exactly what the YAML says."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from launcher.config.recipe_file import RecipeSource, builtin_recipe_names, builtin_recipe_text, read_recipe
from launcher.config.recipe_yaml import compiled_builtin, parse_recipe_yaml

FIX = "run `.venv/bin/python scripts/compile_recipes.py` after editing a built-in recipe"


def _shipped(name: str) -> str:
    return (resources.files("launcher.config") / "recipes" / f"{name}.json").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", builtin_recipe_names())
def test_compiled_json_is_the_yaml(name: str) -> None:
    from_yaml = parse_recipe_yaml(builtin_recipe_text(name), RecipeSource(name, None))
    assert _shipped(name) == compiled_builtin(name), FIX
    assert json.loads(_shipped(name)) == from_yaml, (
        "a value JSON cannot say as the YAML does (a non-text key?)"
    )
    assert read_recipe(RecipeSource(name, None)) == from_yaml


def test_every_compiled_json_has_its_yaml() -> None:
    shipped = {
        p.name.removesuffix(".json")
        for p in (resources.files("launcher.config") / "recipes").iterdir()
        if p.name.endswith(".json")
    }
    assert shipped == set(builtin_recipe_names()), FIX
