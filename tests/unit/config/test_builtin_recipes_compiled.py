"""The built-in recipes ship three times: the YAML people read and edit, the JSON `plan` reads without
PyYAML and the validated recipe it loads without building the schema's validator
(scripts/compile_recipes.py). The JSON must say exactly what the YAML says, and the validated JSON
give back what validating it gives."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from launcher.config.recipe_file import (
    RecipeSource,
    builtin_recipe_names,
    builtin_recipe_text,
    compiled_builtin,
    load_recipe,
    read_recipe,
    validate_recipe,
    validated_builtin,
)
from launcher.config.recipe_yaml import parse_recipe_yaml

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


@pytest.mark.parametrize("name", builtin_recipe_names())
def test_the_loaded_recipe_is_the_yaml_validated(name: str) -> None:
    source = RecipeSource(name, None)
    validated = validate_recipe(parse_recipe_yaml(builtin_recipe_text(name), source), source)
    shipped = (resources.files("launcher.config") / "recipes" / "validated" / f"{name}.json").read_text(
        encoding="utf-8"
    )
    assert shipped == validated_builtin(name), FIX
    # Equal models: the same class, field values and fields set, all the way down.
    assert load_recipe(source) == validated


@pytest.mark.parametrize("folder", ["recipes", "recipes/validated"])
def test_every_compiled_json_has_its_yaml(folder: str) -> None:
    shipped = {
        p.name.removesuffix(".json")
        for p in resources.files("launcher.config").joinpath(folder).iterdir()
        if p.name.endswith(".json")
    }
    assert shipped == set(builtin_recipe_names()), FIX
