"""Fixtures shared by the unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.user_recipe import USER_RECIPE


@pytest.fixture
def user_recipe(tmp_path: Path) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text(USER_RECIPE)
    return str(path)
