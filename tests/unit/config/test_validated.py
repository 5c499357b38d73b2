"""launcher/config/validated.py: a validated recipe as JSON data and back gives the same models,
down to which fields the recipe set, and refuses what would not read back as itself."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from launcher.config.recipe import Recipe
from launcher.config.recipe_file import RecipeSource, builtin_recipe_names, read_recipe, validate_recipe
from launcher.config.validated import dump_validated, load_validated
from tests.unit.user_recipe import USER_RECIPE


def _same(a: Any, b: Any, where: str = "recipe") -> None:
    """Equal values, models of the same class with the same fields set, all the way down."""
    assert type(a) is type(b), where
    if isinstance(a, BaseModel):
        assert a.model_fields_set == b.model_fields_set, where
        for name in type(a).model_fields:
            _same(getattr(a, name), getattr(b, name), f"{where}.{name}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _recipes() -> list[Recipe]:
    """Validated by the schema, never read through the codec under test."""
    sources = [RecipeSource(name, None) for name in builtin_recipe_names()]
    user = validate_recipe(yaml.safe_load(USER_RECIPE), RecipeSource("tiny", "user.yaml"))
    return [user, *(validate_recipe(read_recipe(source), source) for source in sources)]


@pytest.mark.parametrize("recipe", _recipes(), ids=lambda r: r.name)
def test_a_recipe_reads_back_as_itself(recipe: Recipe) -> None:
    back = load_validated(json.loads(json.dumps(dump_validated(recipe), allow_nan=False)))
    assert back == recipe
    _same(back, recipe)


@pytest.mark.parametrize(
    "value",
    [{"$model": "Recipe"}, {"args": {"$model": "x"}}, ("a", "tuple"), {1, 2}],
    ids=["marker-key", "nested-marker-key", "tuple", "set"],
)
def test_what_would_not_read_back_as_itself_is_refused(value: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        dump_validated(value)
